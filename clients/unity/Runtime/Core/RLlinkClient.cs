// An RLlink client over TCP (System.Net.Sockets, optionally TLS): the handshake with the
// token, RLlib's requests, the gateway's thin-client requests, ERROR frames as
// RLlinkException, and reconnection. No Unity types: it runs in Unity (not WebGL: use
// the .jslib bridge there), in mono, in .NET.
//
// Blocking and not thread-safe: call it from one thread (Unity's main thread, or a
// worker thread of your own).

using System;
using System.Collections.Generic;
using System.IO;
using System.Net.Security;
using System.Net.Sockets;
using System.Threading;

namespace RLlink
{
    public sealed class RLlinkClientOptions
    {
        public string Host = "127.0.0.1";
        /// <summary>The gateway's TCP bridge port (its <c>tcp_port</c>, 5555 by default).</summary>
        public int Port = 5555;
        /// <summary>The gateway's <c>auth_token</c> when its auth is on; sent in the first PING.</summary>
        public string Token;
        /// <summary>Speak TLS (the gateway's <c>tls_certfile</c>/<c>tls_keyfile</c> are set).</summary>
        public bool UseTls;
        /// <summary>The name the certificate must carry (default: Host).</summary>
        public string TlsTargetHost;
        /// <summary>Accept a certificate the system does not trust (e.g. a self-signed one you pinned); null: the system's rules.</summary>
        public RemoteCertificateValidationCallback CertificateValidation;
        public int ConnectTimeoutMs = 10000;
        /// <summary>Longest wait for one reply (EPISODES_AND_GET_STATE waits for a training step). 0: forever.</summary>
        public int ReceiveTimeoutMs = 300000;
        /// <summary>Reconnect on the next call after the connection broke.</summary>
        public bool AutoReconnect = true;
        /// <summary>How long to keep trying to (re)connect before giving up with connection_closed.</summary>
        public int ReconnectTimeoutMs = 30000;
        /// <summary>First pause between attempts; doubles up to 5 s.</summary>
        public int ReconnectDelayMs = 250;
        /// <summary>Where the client reports connects and reconnects (null: nowhere).</summary>
        public Action<string> Log;
        /// <summary>The spaces the game declares in GET_CONFIG (<see cref="SpaceInfo.ToJson"/>; null:
        /// none). The gateway checks them against its module (an ERROR naming both spaces when
        /// they differ) or adopts them if it was given none.</summary>
        public Dictionary<string, object> ObservationSpace, ActionSpace;
        /// <summary>The module the declared spaces are for (null: the gateway's default module).</summary>
        public string DeclaredModuleId;
    }

    /// <summary>An action from the gateway (GET_ACTION) or a local policy.</summary>
    public sealed class AgentAction
    {
        /// <summary>As JSON gives it: a number (discrete) or a list of numbers (multi_discrete,
        /// box); from a local policy an int, an int[] or a float[].</summary>
        public object Raw;
        /// <summary>The policy version that chose it.</summary>
        public int WeightsSeqNo;
        public string EpisodeId;

        public AgentAction(object raw, int weightsSeqNo, string episodeId = null)
        {
            Raw = raw;
            WeightsSeqNo = weightsSeqNo;
            EpisodeId = episodeId;
        }

        /// <summary>The action of a discrete space, 0..n-1.</summary>
        public int Discrete
        {
            get
            {
                if (Raw is double) return (int)(double)Raw;
                if (Raw is int) return (int)Raw;
                throw new InvalidOperationException("not a discrete action: " + Json.Serialize(Raw));
            }
        }

        /// <summary>The action of a multi_discrete space: one index per sub-action, the i-th in 0..nvec[i]-1.</summary>
        public int[] MultiDiscrete
        {
            get
            {
                if (Raw is int[]) return (int[])Raw;
                if (Raw is System.Collections.IList) return Json.ToInts(Raw);
                throw new InvalidOperationException("not a multi_discrete action: " + Json.Serialize(Raw));
            }
        }

        /// <summary>The values of a box action (the gateway clips them to the bounds).</summary>
        public float[] Continuous
        {
            get { return Raw is float[] ? (float[])Raw : Json.ToFloats(Raw); }
        }

        public override string ToString() { return Json.Serialize(Raw); }
    }

    /// <summary>One observation of a batched GET_ACTION.</summary>
    public struct ActionRequest
    {
        public string EpisodeId;
        public float[] Obs;
        public bool Explore;
        /// <summary>The actions allowed at this step, one value per logit (1 allowed, 0
        /// forbidden; a module with action_masking); null: all allowed.</summary>
        public float[] ActionMask;

        public ActionRequest(string episodeId, float[] obs, bool explore = true)
        {
            EpisodeId = episodeId;
            Obs = obs;
            Explore = explore;
            ActionMask = null;
        }

        public ActionRequest(string episodeId, float[] obs, float[] actionMask, bool explore = true)
        {
            EpisodeId = episodeId;
            Obs = obs;
            Explore = explore;
            ActionMask = actionMask;
        }
    }

    public sealed class RLlinkClient : IDisposable
    {
        static readonly Dictionary<string, string> ReplyTypes = new Dictionary<string, string>
        {
            { "PING", "PONG" },
            { "GET_CONFIG", "SET_CONFIG" },
            { "GET_STATE", "SET_STATE" },
            { "EPISODES_AND_GET_STATE", "SET_STATE" },
            { "START_EPISODE", "EPISODE_STARTED" },
            { "GET_ACTION", "ACTION" },
        };

        readonly RLlinkClientOptions options;
        TcpClient tcp;
        Stream stream;
        readonly MemoryStream outgoing = new MemoryStream();
        // Requests sent that get no reply unless refused (EPISODES, LOG_*, END_EPISODE),
        // since the last reply: an ERROR may still come for them.
        readonly List<string> unconfirmed = new List<string>();
        bool everConnected;

        public RLlinkClient(RLlinkClientOptions options)
        {
            this.options = options;
        }

        public RLlinkClient(string host, int port, string token = null)
            : this(new RLlinkClientOptions { Host = host, Port = port, Token = token }) { }

        public RLlinkClientOptions Options { get { return options; } }

        /// <summary>SET_CONFIG of the current connection (null before the first connect).</summary>
        public GatewayConfig Config { get; private set; }

        public bool IsConnected { get { return stream != null; } }

        /// <summary>Counts successful connects: thin episodes belong to one connection, so a
        /// change means the episodes started before are gone (the gateway ended them as truncated).</summary>
        public int ConnectionNumber { get; private set; }

        // -- Connection ----------------------------------------------------------------

        /// <summary>
        /// Open the connection and do the handshake: PING (with the token) and GET_CONFIG.
        /// Retries until <see cref="RLlinkClientOptions.ReconnectTimeoutMs"/> while the gateway
        /// cannot be reached or is full; an <c>unauthorized</c> answer is thrown at once.
        /// </summary>
        public GatewayConfig Connect()
        {
            Disconnect();
            var deadline = DateTime.UtcNow.AddMilliseconds(options.ReconnectTimeoutMs);
            int delay = options.ReconnectDelayMs;
            int attempt = 0;
            while (true)
            {
                attempt++;
                try
                {
                    Open();
                    Exchange(Ping(), "PONG");
                    Config = GatewayConfig.FromJson(Exchange(ConfigRequest(), "SET_CONFIG"));
                    ConnectionNumber++;
                    Say((everConnected ? "reconnected to " : "connected to ") + options.Host + ":" + options.Port
                        + (attempt > 1 ? " (attempt " + attempt + ")" : ""));
                    everConnected = true;
                    return Config;
                }
                catch (RLlinkException e)
                {
                    Disconnect();
                    bool retry = e.Code == RLlinkException.ConnectionClosed || e.Code == "too_many_connections" || e.Code == "idle_timeout";
                    if (!retry || DateTime.UtcNow.AddMilliseconds(delay) > deadline) throw;
                    Say("cannot connect to " + options.Host + ":" + options.Port + " (" + e.Message + "); retrying in " + delay + " ms");
                }
                Thread.Sleep(delay);
                delay = Math.Min(delay * 2, 5000);
            }
        }

        void Open()
        {
            var client = new TcpClient { NoDelay = true };
            try
            {
                var pending = client.BeginConnect(options.Host, options.Port, null, null);
                if (!pending.AsyncWaitHandle.WaitOne(options.ConnectTimeoutMs))
                    throw new IOException("no answer within " + options.ConnectTimeoutMs + " ms");
                client.EndConnect(pending);
                client.ReceiveTimeout = options.ReceiveTimeoutMs;
                Stream s = client.GetStream();
                if (options.UseTls)
                {
                    var tls = new SslStream(s, false, options.CertificateValidation);
                    tls.AuthenticateAsClient(options.TlsTargetHost ?? options.Host);
                    s = tls;
                }
                tcp = client;
                stream = s;
            }
            catch (Exception e) when (e is IOException || e is SocketException || e is System.Security.Authentication.AuthenticationException)
            {
                client.Close();
                throw new RLlinkException(RLlinkException.ConnectionClosed,
                    "cannot connect to " + options.Host + ":" + options.Port + ": " + e.Message, null, null, e);
            }
        }

        /// <summary>Send what is still queued and close the connection (open thin episodes end as truncated).</summary>
        public void Close()
        {
            try
            {
                if (stream != null) WriteOutgoing();
            }
            catch (IOException) { }
            Disconnect();
        }

        public void Dispose() { Close(); }

        void Disconnect()
        {
            if (stream != null) { try { stream.Close(); } catch (IOException) { } }
            if (tcp != null) tcp.Close();
            stream = null;
            tcp = null;
            outgoing.SetLength(0);
            unconfirmed.Clear();
        }

        void EnsureConnected()
        {
            if (stream != null) return;
            if (everConnected && !options.AutoReconnect)
                throw new RLlinkException(RLlinkException.ConnectionClosed, "the connection is closed (AutoReconnect is off)");
            Connect();
        }

        void Say(string text)
        {
            if (options.Log != null) options.Log(text);
        }

        // -- Requests --------------------------------------------------------------------

        /// <summary>A message with its type, to add fields to.</summary>
        public static Dictionary<string, object> Message(string type)
        {
            return new Dictionary<string, object> { { "type", type } };
        }

        /// <summary>GET_CONFIG, with the spaces the game declares (RLlinkClientOptions).</summary>
        Dictionary<string, object> ConfigRequest()
        {
            var request = Message("GET_CONFIG");
            if (options.ObservationSpace == null && options.ActionSpace == null) return request;
            var spaces = new Dictionary<string, object>();
            if (options.ObservationSpace != null) spaces["observation_space"] = options.ObservationSpace;
            if (options.ActionSpace != null) spaces["action_space"] = options.ActionSpace;
            if (options.DeclaredModuleId == null)
                foreach (var entry in spaces) request[entry.Key] = entry.Value;
            else
                request["policies"] = new Dictionary<string, object> { { options.DeclaredModuleId, spaces } };
            return request;
        }

        Dictionary<string, object> Ping()
        {
            var ping = Message("PING");
            if (!string.IsNullOrEmpty(options.Token)) ping["token"] = options.Token;
            return ping;
        }

        /// <summary>
        /// Send a request that gets a reply and return the reply. Throws RLlinkException for
        /// an ERROR frame (the connection stays usable unless <see cref="RLlinkException.IsFatal"/>),
        /// or for an ERROR that refused an earlier <see cref="Send"/>.
        /// </summary>
        public Dictionary<string, object> Request(Dictionary<string, object> message)
        {
            EnsureConnected();
            string type = Json.GetString(message, "type");
            string expected;
            ReplyTypes.TryGetValue(type ?? "", out expected);
            return Exchange(message, expected);
        }

        Dictionary<string, object> Exchange(Dictionary<string, object> message, string expectedReply)
        {
            string type = Json.GetString(message, "type");
            // Errors of earlier no-reply messages come before this reply. A PING between them
            // and this request tells them apart: an ERROR before its PONG is theirs.
            bool marker = unconfirmed.Count > 0;
            if (marker) Queue(Message("PING"));
            Queue(message);
            RLlinkException earlier = null;
            try
            {
                WriteOutgoing();
                if (marker)
                {
                    while (true)
                    {
                        var frame = ReadMessage(type);
                        string frameType = Json.GetString(frame, "type");
                        if (frameType == "PONG") break;
                        if (frameType == "ERROR")
                        {
                            var error = RLlinkException.FromErrorFrame(frame, string.Join(",", unconfirmed.ToArray()));
                            if (error.IsFatal) throw error;
                            if (earlier == null) earlier = error;
                            continue;
                        }
                        throw new RLlinkException(RLlinkException.UnexpectedReply, "expected PONG, got " + frameType, null, type);
                    }
                    unconfirmed.Clear();
                }
                var reply = ReadMessage(type);
                string replyType = Json.GetString(reply, "type");
                if (replyType == "ERROR") throw earlier ?? RLlinkException.FromErrorFrame(reply, type);
                if (earlier != null) throw earlier;
                if (expectedReply != null && replyType != expectedReply)
                    throw new RLlinkException(RLlinkException.UnexpectedReply, type + " was answered by " + replyType, null, type);
                return reply;
            }
            catch (RLlinkException e)
            {
                if (e.IsFatal) Disconnect();
                throw;
            }
            catch (IOException e)
            {
                Disconnect();
                throw new RLlinkException(RLlinkException.ConnectionClosed, "the connection to the gateway broke: " + e.Message, null, type, e);
            }
        }

        /// <summary>
        /// Send a message that gets no reply (EPISODES, LOG_ACTION, LOG_RETURNS, END_EPISODE).
        /// LOG_* wait in a buffer for the next request (one write, one round trip per step);
        /// the rest go at once. If the gateway refuses one, the ERROR is thrown by the next
        /// <see cref="Request"/> (or <see cref="Flush"/>) with <c>Request</c> naming it.
        /// </summary>
        public void Send(Dictionary<string, object> message)
        {
            EnsureConnected();
            string type = Json.GetString(message, "type");
            Queue(message);
            unconfirmed.Add(type);
            if (type == "LOG_RETURNS" || type == "LOG_ACTION") return;
            try
            {
                WriteOutgoing();
            }
            catch (IOException e)
            {
                Disconnect();
                throw new RLlinkException(RLlinkException.ConnectionClosed, "the connection to the gateway broke: " + e.Message, null, type, e);
            }
        }

        /// <summary>Send what is queued and wait until the gateway has read it (a PING): throws
        /// the ERROR of any message it refused.</summary>
        public void Flush()
        {
            Exchange(Ping(), "PONG");
        }

        void Queue(Dictionary<string, object> message)
        {
            byte[] frame = Framing.Encode(Json.Serialize(message));
            outgoing.Write(frame, 0, frame.Length);
        }

        void WriteOutgoing()
        {
            if (outgoing.Length == 0) return;
            if (stream == null) throw new IOException("not connected");
            stream.Write(outgoing.GetBuffer(), 0, (int)outgoing.Length);
            stream.Flush();
            outgoing.SetLength(0);
        }

        Dictionary<string, object> ReadMessage(string request)
        {
            string body = Framing.ReadFrame(stream);
            if (body == null) throw new IOException("the gateway closed the connection");
            try
            {
                return Json.ParseObject(body);
            }
            catch (FormatException e)
            {
                throw new RLlinkException(RLlinkException.BadFrame, "the gateway's reply is not a JSON object: " + e.Message, null, request);
            }
        }

        // -- RLlink (RLlib's requests) --------------------------------------------------------

        /// <summary>PING -> PONG.</summary>
        public void PingGateway() { EnsureConnected(); Exchange(Ping(), "PONG"); }

        /// <summary>GET_CONFIG -> SET_CONFIG (also done by the handshake: see <see cref="Config"/>).</summary>
        public GatewayConfig GetConfig()
        {
            EnsureConnected();
            Config = GatewayConfig.FromJson(Exchange(ConfigRequest(), "SET_CONFIG"));
            return Config;
        }

        /// <summary>GET_STATE -> SET_STATE: the current policy.</summary>
        public PolicyState GetState()
        {
            EnsureConnected();
            return State(Exchange(Message("GET_STATE"), "SET_STATE"));
        }

        /// <summary>
        /// EPISODES_AND_GET_STATE -> SET_STATE: send episode chunks (dictionaries with obs,
        /// actions, rewards, is_terminated, is_truncated, ...) and get the policy trained on
        /// them (with force_on_policy the reply waits for that training step).
        /// </summary>
        public PolicyState EpisodesAndGetState(IList<Dictionary<string, object>> episodes, int envSteps)
        {
            EnsureConnected();
            var message = Message("EPISODES_AND_GET_STATE");
            message["episodes"] = episodes;
            message["env_steps"] = envSteps;
            return State(Exchange(message, "SET_STATE"));
        }

        /// <summary>A SET_STATE as a PolicyState; its <c>env_params</c>, when a curriculum lesson
        /// changed them, update <see cref="Config"/>'s.</summary>
        PolicyState State(Dictionary<string, object> setState)
        {
            if (Config != null) Config.TakeEnvParams(setState);
            return PolicyState.FromJson(setState);
        }

        /// <summary>EPISODES: send chunks without waiting for a new policy.</summary>
        public void SendEpisodes(IList<Dictionary<string, object>> episodes, int envSteps)
        {
            var message = Message("EPISODES");
            message["episodes"] = episodes;
            message["env_steps"] = envSteps;
            Send(message);
        }

        // -- Server-side inference (thin clients) ----------------------------------------------

        /// <summary>START_EPISODE -> EPISODE_STARTED; returns the episode id (valid on this connection only).</summary>
        public string StartEpisode(string episodeId = null, string agentId = null, string moduleId = null, bool trainingEnabled = true)
        {
            bool evaluation;
            return StartEpisode(episodeId, agentId, moduleId, trainingEnabled, out evaluation);
        }

        /// <summary>As <see cref="StartEpisode(string, string, string, bool)"/>; <paramref name="evaluation"/>:
        /// the gateway plays the episode as an evaluation one (EPISODE_STARTED's <c>evaluation</c>,
        /// every Nth of its evaluation_interval): the distribution's mode, never trained on.</summary>
        public string StartEpisode(string episodeId, string agentId, string moduleId, bool trainingEnabled, out bool evaluation)
        {
            EnsureConnected();
            var message = Message("START_EPISODE");
            if (episodeId != null) message["episode_id"] = episodeId;
            if (agentId != null) message["agent_id"] = agentId;
            if (moduleId != null) message["module_id"] = moduleId;
            if (!trainingEnabled) message["training_enabled"] = false;
            var reply = Exchange(message, "EPISODE_STARTED");
            evaluation = Json.GetBool(reply, "evaluation", false);
            return Json.GetString(reply, "episode_id");
        }

        /// <summary>GET_ACTION -> ACTION: the gateway's policy acts on <paramref name="obs"/>
        /// (which also completes the episode's previous step). explore false: the most likely action.</summary>
        public AgentAction GetAction(string episodeId, float[] obs, bool explore = true)
        {
            return GetAction(episodeId, obs, null, explore);
        }

        /// <summary>GET_ACTION with the step's action mask (a module with action_masking): one
        /// value per logit, 1 allowed, 0 forbidden (null: all allowed). The gateway answers an
        /// allowed action and trains with the mask.</summary>
        public AgentAction GetAction(string episodeId, float[] obs, float[] actionMask, bool explore = true)
        {
            EnsureConnected();
            var message = Message("GET_ACTION");
            message["episode_id"] = episodeId;
            message["obs"] = obs;
            if (!explore) message["explore"] = false;
            if (actionMask != null) message["action_mask"] = actionMask;
            var reply = Exchange(message, "ACTION");
            object action;
            reply.TryGetValue("action", out action);
            return new AgentAction(action, Json.GetInt(reply, "weights_seq_no"), Json.GetString(reply, "episode_id", episodeId));
        }

        /// <summary>GET_ACTION with a batch: one action per request, in its order, in one round trip.</summary>
        public AgentAction[] GetActions(IList<ActionRequest> batch)
        {
            EnsureConnected();
            var items = new List<object>(batch.Count);
            foreach (var item in batch)
            {
                var entry = new Dictionary<string, object> { { "episode_id", item.EpisodeId }, { "obs", item.Obs } };
                if (!item.Explore) entry["explore"] = false;
                if (item.ActionMask != null) entry["action_mask"] = item.ActionMask;
                items.Add(entry);
            }
            var message = Message("GET_ACTION");
            message["batch"] = items;
            var reply = Exchange(message, "ACTION");
            var actions = Json.GetList(reply, "actions") ?? new List<object>();
            int version = Json.GetInt(reply, "weights_seq_no");
            var result = new AgentAction[actions.Count];
            for (int i = 0; i < actions.Count; i++)
                result[i] = new AgentAction(actions[i], version, i < batch.Count ? batch[i].EpisodeId : null);
            return result;
        }

        /// <summary>LOG_ACTION: an action the game chose itself (a human, a script) on <paramref name="obs"/>.
        /// <paramref name="action"/>: an int (discrete), int[] (multi_discrete) or float[] (box).</summary>
        public void LogAction(string episodeId, float[] obs, object action)
        {
            LogAction(episodeId, obs, action, null);
        }

        /// <summary>LOG_ACTION with the mask the action was chosen among (it must allow it).</summary>
        public void LogAction(string episodeId, float[] obs, object action, float[] actionMask)
        {
            var message = Message("LOG_ACTION");
            message["episode_id"] = episodeId;
            message["obs"] = obs;
            message["action"] = action;
            if (actionMask != null) message["action_mask"] = actionMask;
            Send(message);
        }

        /// <summary>LOG_RETURNS: reward for the episode's last action (added up if sent twice).</summary>
        public void LogReturns(string episodeId, float reward)
        {
            var message = Message("LOG_RETURNS");
            message["episode_id"] = episodeId;
            message["reward"] = reward;
            Send(message);
        }

        /// <summary>END_EPISODE with the final observation; terminated (a terminal state) or truncated (a time limit).</summary>
        public void EndEpisode(string episodeId, float[] obs, bool terminated = true, bool truncated = false)
        {
            var message = Message("END_EPISODE");
            message["episode_id"] = episodeId;
            message["obs"] = obs;
            message["is_terminated"] = terminated;
            message["is_truncated"] = truncated;
            Send(message);
        }
    }
}
