// The C# side of Plugins/WebGL/RLlink.jslib: RLlink from a Unity WebGL player, through
// static/rllink.js over the gateway's WebSocket. Non-blocking: each call returns a
// WebGLRequest to check on later frames (IsDone, then Reply or Error).
//
//   var gateway = new RLlinkWebGLClient("ws://127.0.0.1:8000/rllink", token);
//   // each frame: if (gateway.IsReady) { ... }
//   var start = gateway.StartEpisode(myEpisodeId);              // pipelined:
//   var act = gateway.GetAction(myEpisodeId, obs);              // no wait for start
//   // a later frame: if (act.IsDone) { if (act.Error != null) ... else use act.Action }
//
// LogAction, LogReturns and EndEpisode get no reply from the gateway, but their requests
// still finish: rllink.js sends a PING after each, so IsDone turns true once the gateway
// has accepted the message (Reply: that PONG) or refused it (Error: its ERROR). Poll
// them for errors (WebGLAgentLink does) or ignore them (the bridge then keeps their
// tickets until the page unloads; Forget() drops one).
//
// Only a WebGL player has the plugin: elsewhere these calls throw EntryPointNotFound
// (use RLlinkClient, over TCP, there). RLlinkAgent picks the right one.

using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;

namespace RLlink.Unity
{
    public static class RLlinkWebGLNative
    {
        [DllImport("__Internal")] public static extern int RLlink_Connect(string url, string token, string moduleUrl);
        [DllImport("__Internal")] public static extern int RLlink_Status(int connection);
        [DllImport("__Internal")] public static extern string RLlink_Error(int connection);
        [DllImport("__Internal")] public static extern string RLlink_Config(int connection);
        [DllImport("__Internal")] public static extern void RLlink_Close(int connection);
        [DllImport("__Internal")] public static extern int RLlink_Request(int connection, string json);
        [DllImport("__Internal")] public static extern int RLlink_StartEpisode(int connection, string optionsJson);
        [DllImport("__Internal")] public static extern int RLlink_GetAction(int connection, string episodeId, float[] obs, int obsLength, bool explore);
        [DllImport("__Internal")] public static extern int RLlink_GetActions(int connection, string batchJson);
        [DllImport("__Internal")] public static extern int RLlink_LogAction(int connection, string episodeId, float[] obs, int obsLength, string actionJson);
        [DllImport("__Internal")] public static extern int RLlink_LogReturns(int connection, string episodeId, float reward);
        [DllImport("__Internal")] public static extern int RLlink_EndEpisode(int connection, string episodeId, float[] obs, int obsLength, bool terminated, bool truncated);
        [DllImport("__Internal")] public static extern int RLlink_Poll(int ticket);
        [DllImport("__Internal")] public static extern string RLlink_TakeResult(int ticket);
        [DllImport("__Internal")] public static extern void RLlink_Forget(int ticket);
    }

    /// <summary>A request under way through the bridge.</summary>
    public sealed class WebGLRequest
    {
        readonly int ticket;
        Dictionary<string, object> reply;
        RLlinkException error;
        bool done;

        internal WebGLRequest(int ticket) { this.ticket = ticket; }

        /// <summary>The reply (or an error) is here; polls the bridge.</summary>
        public bool IsDone
        {
            get
            {
                if (done) return true;
                int state = RLlinkWebGLNative.RLlink_Poll(ticket);
                if (state == 0) return false;
                done = true;
                var result = state > 0 ? RLlinkWebGLNative.RLlink_TakeResult(ticket) : "";
                var parsed = string.IsNullOrEmpty(result) || result == "null" ? new Dictionary<string, object>() : Json.ParseObject(result);
                if (state == 1) reply = parsed;
                else error = state == 2
                    ? RLlinkException.FromErrorFrame(parsed, Json.GetString(parsed, "request"))
                    : new RLlinkException(RLlinkException.UnexpectedReply, "ticket " + ticket + " is unknown to the bridge");
                return true;
            }
        }

        /// <summary>The reply message (null until done, or on error).</summary>
        public Dictionary<string, object> Reply { get { return IsDone ? reply : null; } }
        /// <summary>The gateway's ERROR (or a broken connection) as an exception, or null.</summary>
        public RLlinkException Error { get { return IsDone ? error : null; } }

        /// <summary>Drop the bridge's ticket: the result is not wanted.</summary>
        public void Forget()
        {
            if (!done) RLlinkWebGLNative.RLlink_Forget(ticket);
            done = true;
        }

        /// <summary>ACTION's actions (for GetActions), in the batch's order, once done.</summary>
        public AgentAction[] Actions
        {
            get
            {
                var message = Reply;
                if (message == null) return null;
                var actions = Json.GetList(message, "actions") ?? new List<object>();
                int version = Json.GetInt(message, "weights_seq_no");
                var result = new AgentAction[actions.Count];
                for (int i = 0; i < actions.Count; i++) result[i] = new AgentAction(actions[i], version);
                return result;
            }
        }

        /// <summary>ACTION's action (for GetAction), once done.</summary>
        public AgentAction Action
        {
            get
            {
                var message = Reply;
                if (message == null) return null;
                object action;
                message.TryGetValue("action", out action);
                return new AgentAction(action, Json.GetInt(message, "weights_seq_no"), Json.GetString(message, "episode_id"));
            }
        }
    }

    /// <summary>A connection to the gateway from a WebGL player (see the file's header).</summary>
    public sealed class RLlinkWebGLClient
    {
        readonly int connection;
        GatewayConfig config;

        /// <param name="url">ws(s)://host:port/rllink</param>
        /// <param name="token">the gateway's auth_token, or null</param>
        /// <param name="moduleUrl">where to import rllink.js from (null: the gateway's /static/rllink.js)</param>
        public RLlinkWebGLClient(string url, string token = null, string moduleUrl = null)
        {
            connection = RLlinkWebGLNative.RLlink_Connect(url, token ?? "", moduleUrl ?? "");
        }

        /// <summary>The handshake (PING with the token, GET_CONFIG) is done.</summary>
        public bool IsReady { get { return RLlinkWebGLNative.RLlink_Status(connection) == 1; } }

        /// <summary>The connection failed or closed; <see cref="Error"/> says why.</summary>
        public bool IsClosed { get { return RLlinkWebGLNative.RLlink_Status(connection) < 0; } }

        public RLlinkException Error
        {
            get
            {
                string json = RLlinkWebGLNative.RLlink_Error(connection);
                if (string.IsNullOrEmpty(json)) return null;
                var parsed = Json.ParseObject(json);
                return RLlinkException.FromErrorFrame(parsed, Json.GetString(parsed, "request"));
            }
        }

        /// <summary>SET_CONFIG, once ready (null before).</summary>
        public GatewayConfig Config
        {
            get
            {
                if (config == null)
                {
                    string json = RLlinkWebGLNative.RLlink_Config(connection);
                    if (!string.IsNullOrEmpty(json)) config = GatewayConfig.FromJson(Json.ParseObject(json));
                }
                return config;
            }
        }

        public WebGLRequest Request(Dictionary<string, object> message)
        {
            return new WebGLRequest(RLlinkWebGLNative.RLlink_Request(connection, Json.Serialize(message)));
        }

        public WebGLRequest StartEpisode(string episodeId = null, string agentId = null, string moduleId = null, bool trainingEnabled = true)
        {
            var options = new Dictionary<string, object>();
            if (episodeId != null) options["episode_id"] = episodeId;
            if (agentId != null) options["agent_id"] = agentId;
            if (moduleId != null) options["module_id"] = moduleId;
            if (!trainingEnabled) options["training_enabled"] = false;
            return new WebGLRequest(RLlinkWebGLNative.RLlink_StartEpisode(connection, Json.Serialize(options)));
        }

        public WebGLRequest GetAction(string episodeId, float[] obs, bool explore = true)
        {
            return new WebGLRequest(RLlinkWebGLNative.RLlink_GetAction(connection, episodeId, obs, obs.Length, explore));
        }

        public WebGLRequest GetActions(IList<ActionRequest> batch)
        {
            var items = new List<object>();
            foreach (var item in batch)
            {
                var entry = new Dictionary<string, object> { { "episode_id", item.EpisodeId }, { "obs", item.Obs }, { "explore", item.Explore } };
                if (item.ActionMask != null) entry["action_mask"] = item.ActionMask;
                items.Add(entry);
            }
            return new WebGLRequest(RLlinkWebGLNative.RLlink_GetActions(connection, Json.Serialize(items)));
        }

        public WebGLRequest LogAction(string episodeId, float[] obs, object action)
        {
            return new WebGLRequest(RLlinkWebGLNative.RLlink_LogAction(connection, episodeId, obs, obs.Length, Json.Serialize(action)));
        }

        public WebGLRequest LogReturns(string episodeId, float reward)
        {
            return new WebGLRequest(RLlinkWebGLNative.RLlink_LogReturns(connection, episodeId, reward));
        }

        public WebGLRequest EndEpisode(string episodeId, float[] obs, bool terminated = true, bool truncated = false)
        {
            return new WebGLRequest(RLlinkWebGLNative.RLlink_EndEpisode(connection, episodeId, obs, obs.Length, terminated, truncated));
        }

        public void Close() { RLlinkWebGLNative.RLlink_Close(connection); }
    }

    /// <summary>An RLlinkAgent in a WebGL player: thin mode through the bridge. The episode id
    /// is chosen here, so START_EPISODE and the first GET_ACTION go out together.</summary>
    public sealed class WebGLAgentLink : IAgentLink
    {
        readonly RLlinkWebGLClient client;
        readonly string agentId, moduleId;
        readonly bool explore, trainingEnabled;
        readonly List<WebGLRequest> unanswered = new List<WebGLRequest>(); // no reply wanted; errors only
        WebGLRequest pendingAction;
        WebGLRequest starting; // the open episode's START_EPISODE, until its EPISODE_STARTED is read
        bool pendingBatch; // pendingAction is a one-item batch (it carries an action mask)
        string episodeId;
        float pendingReward;
        bool acted;

        public WebGLAgentLink(string url, string token, string moduleUrl, string agentId, string moduleId, bool explore, bool trainingEnabled)
        {
            client = new RLlinkWebGLClient(url, string.IsNullOrEmpty(token) ? null : token, string.IsNullOrEmpty(moduleUrl) ? null : moduleUrl);
            this.agentId = agentId;
            this.moduleId = moduleId;
            this.explore = explore;
            this.trainingEnabled = trainingEnabled;
        }

        public bool Ready { get { return client.IsReady; } }

        public void RequestAction(float[] obs, float[] actionMask)
        {
            if (episodeId == null)
            {
                episodeId = Guid.NewGuid().ToString("N");
                starting = client.StartEpisode(episodeId, agentId, moduleId, trainingEnabled);
                unanswered.Add(starting);
                IsEvaluationEpisode = false; // until EPISODE_STARTED says otherwise
                acted = false;
                pendingReward = 0;
            }
            if (acted && pendingReward != 0) unanswered.Add(client.LogReturns(episodeId, pendingReward));
            pendingReward = 0;
            // The bridge's single GET_ACTION takes no mask; a one-item batch does.
            pendingBatch = actionMask != null;
            pendingAction = pendingBatch
                ? client.GetActions(new[] { new ActionRequest(episodeId, obs, actionMask, explore) })
                : client.GetAction(episodeId, obs, explore);
        }

        public bool TryTakeAction(out AgentAction action)
        {
            action = null;
            if (pendingAction == null || !pendingAction.IsDone) return false;
            var request = pendingAction;
            pendingAction = null;
            if (request.Error != null) throw request.Error;
            if (starting != null && starting.IsDone) // answered before this ACTION (replies come in order)
            {
                IsEvaluationEpisode = starting.Reply != null && Json.GetBool(starting.Reply, "evaluation", false);
                starting = null;
            }
            acted = true;
            action = pendingBatch ? request.Actions[0] : request.Action;
            return true;
        }

        public void AddReward(float reward) { pendingReward += reward; }

        public void EndEpisode(float[] finalObs, bool terminated, bool truncated)
        {
            if (episodeId == null) return;
            if (acted && pendingReward != 0) unanswered.Add(client.LogReturns(episodeId, pendingReward));
            unanswered.Add(client.EndEpisode(episodeId, finalObs, terminated, truncated));
            episodeId = null;
            pendingReward = 0;
        }

        public RLlinkException TakeError()
        {
            if (client.IsClosed) return client.Error ?? new RLlinkException(RLlinkException.ConnectionClosed, "the WebSocket closed");
            for (int i = unanswered.Count - 1; i >= 0; i--)
            {
                if (!unanswered[i].IsDone) continue;
                var error = unanswered[i].Error;
                unanswered.RemoveAt(i);
                if (error != null) return error;
            }
            return null;
        }

        public GatewayConfig Config { get { return client.IsReady ? client.Config : null; } }

        /// <summary>The gateway plays the episode as an evaluation one (EPISODE_STARTED's
        /// <c>evaluation</c>), known from its first action on.</summary>
        public bool IsEvaluationEpisode { get; private set; }

        public void Close() { client.Close(); }
    }
}
