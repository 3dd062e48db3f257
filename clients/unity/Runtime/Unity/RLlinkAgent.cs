// The Unity adapter: a MonoBehaviour agent, in the spirit of ML-Agents' Agent, that
// trains through an RLlink gateway. Subclass it, fill in the hooks, add it to a
// GameObject:
//
//   public class BalanceAgent : RLlinkAgent
//   {
//       protected override void OnEpisodeBegin() { /* reset the scene */ }
//       protected override void CollectObservations(List<float> obs) { obs.Add(...); }
//       protected override void OnActionReceived(AgentAction action)
//       {
//           /* act with action.Discrete, action.MultiDiscrete or action.Continuous */
//           AddReward(0.01f);
//           if (fell) EndEpisode();                // terminated
//       }
//       // Optional, for a module with action_masking: the actions allowed now.
//       protected override float[] GetActionMask() { return new float[] { 1, canJump ? 1 : 0, 1 }; }
//       // Optional, for inference Heuristic: the game's own action (keyboard, a script).
//       protected override object Heuristic() { return Input.GetKey(KeyCode.RightArrow) ? 1 : 0; }
//   }
//
// Every decisionPeriod FixedUpdates the agent collects an observation and asks for an
// action; the hooks run on Unity's main thread. Standalone, editor and mobile players
// speak TCP through RLlinkClient (blocking: a thin step is one round trip, well under a
// millisecond on localhost; use local inference for a distant gateway). WebGL players
// cannot open sockets: there the agent goes through the .jslib bridge
// (Plugins/WebGL/RLlink.jslib) to static/rllink.js over the gateway's WebSocket, thin
// mode only, and an action arrives a frame or so after it was asked for. With a
// bundledModel (the gateway's export of a trained policy) the agent plays it with no
// gateway at all, on every platform (WebGL included). With inference Heuristic the game's
// Heuristic() plays (a human or a script); with a host set, each of its actions is logged
// to the gateway (LOG_ACTION), which trains on them; with host empty nothing is sent. With
// recordDemosPath set, a heuristic agent also writes each episode it finishes to that
// demonstrations file (DemoRecorder: RLlink episode chunks, one a line), gateway or not:
// the file a gateway's `demos` setting pre-trains a policy on (docs/training.md).
//
// Launched by a gateway (rllink-gateway --env-path BUILD), the player reads the
// --rllink-host, --rllink-port, --rllink-token, --rllink-time-scale and --rllink-env-index
// arguments it was given, which win over the inspector's settings (readLaunchArguments).
//
// The package's README.md (Packages/com.rllink.gateway-client/README.md; in the
// repository clients/unity/README.md) has the set-up, thin vs local mode and WebGL.
// CI compiles this file with mono against stand-ins of the UnityEngine types it uses
// (clients/csharp/stubs/, outside the package); it has not been run in Unity by CI.

using System;
using System.Collections.Generic;
using System.IO;
using UnityEngine;

namespace RLlink.Unity
{
    public abstract class RLlinkAgent : MonoBehaviour
    {
        [Header("Gateway")]
        [Tooltip("Host of the gateway (TCP) or, in WebGL, ws(s)://host:port/rllink")]
        public string host = "127.0.0.1";
        [Tooltip("The gateway's TCP port (tcp_port); unused in WebGL (the URL has it)")]
        public int port = 5555;
        [Tooltip("The gateway's auth_token, if its auth is on")]
        public string token = "";
        public bool useTls;
        [Tooltip("WebGL: URL of rllink.js (empty: <gateway>/static/rllink.js)")]
        public string rllinkModuleUrl = "";

        [Header("Agent")]
        public InferenceMode inference = InferenceMode.Thin;
        [Tooltip("agent_id: picks the module through the gateway's policy_mapping (optional)")]
        public string agentId = "";
        [Tooltip("module_id: the module to play (optional; wins over the mapping)")]
        public string moduleId = "";
        [Tooltip("Ask for an action every this many FixedUpdates; repeat it in between")]
        public int decisionPeriod = 1;
        [Tooltip("0: no limit; else the episode is truncated after this many decisions")]
        public int maxSteps;
        public bool explore = true;
        public bool trainingEnabled = true;
        public int seed;

        [Header("Spaces the game declares (checked by the gateway at connect)")]
        [Tooltip("Floats CollectObservations adds (0: declare nothing)")]
        public int observationSize;
        [Tooltip("One entry: Discrete(n); several: MultiDiscrete (one size per sub-action). Empty: see continuousActions")]
        public int[] discreteActions = new int[0];
        [Tooltip("Continuous actions (a box of this size); 0 with no discreteActions: declare no action space")]
        public int continuousActions;

        [Header("Speed and launching")]
        [Tooltip("Time.timeScale while the agent runs (1: real time; 20: as ML-Agents trains). A gateway's --rllink-time-scale wins")]
        public float timeScale = 1f;
        [Tooltip("Take the gateway's --rllink-* command-line arguments (a build it launched) over these settings")]
        public bool readLaunchArguments = true;

        [Header("Play without a gateway")]
        [Tooltip("A trained policy to play with no gateway: the gateway's GET /api/model.onnx saved as model.onnx.bytes "
            + "(a TextAsset). Empty: train through the gateway")]
        public TextAsset bundledModel;

        [Header("Demonstrations")]
        [Tooltip("Inference Heuristic: append each finished episode to this file as RLlink episode chunks (JSONL), the "
            + "gateway's `demos` format. Empty: record nothing")]
        public string recordDemosPath = "";

        IAgentLink link;
        AgentAction lastAction;
        int fixedUpdates, episodeSteps;
        bool waitingForAction, episodeBegun, ending;
        bool endTerminated, endTruncated;
        readonly List<float> observations = new List<float>();

        /// <summary>Return of the episode so far (the rewards added).</summary>
        public float EpisodeReturn { get; private set; }
        /// <summary>Decisions taken in this episode.</summary>
        public int StepCount { get { return episodeSteps; } }
        public int CompletedEpisodes { get; private set; }
        /// <summary>This episode is an evaluation one (the gateway's evaluation_interval: every
        /// Nth episode is played with the distribution's mode, never trained on, its return
        /// reported apart): known from the episode's first OnActionReceived on, and kept until
        /// the next episode's, so it still describes an episode just ended. Never for
        /// Heuristic play or a bundledModel.</summary>
        public bool IsEvaluationEpisode { get { return link != null && link.IsEvaluationEpisode; } }

        // -- The hooks -------------------------------------------------------------------------

        /// <summary>Reset the scene for a new episode.</summary>
        protected virtual void OnEpisodeBegin() { }

        /// <summary>Add the observation's values, always the same number (the gateway's observation space).</summary>
        protected abstract void CollectObservations(List<float> obs);

        /// <summary>Act: action.Discrete (discrete space), action.MultiDiscrete (multi_discrete:
        /// one index per sub-action) or action.Continuous (box, clipped to its bounds).</summary>
        protected abstract void OnActionReceived(AgentAction action);

        /// <summary>
        /// The actions allowed at this decision, for a module with the gateway's
        /// <c>action_masking</c>: one value per logit (n for Discrete(n); sum(nvec) for a
        /// MultiDiscrete, sub-action 0's first), 1 allowed, 0 forbidden, each sub-action with at
        /// least one allowed. Null (the default): all allowed. Called right after
        /// CollectObservations at each decision; the action chosen is one it allows (thin mode:
        /// the gateway's GET_ACTION takes it; local mode: the model's second input, and the
        /// chunk records it). Between decisions (decisionPeriod > 1) the action is repeated as is.
        /// </summary>
        protected virtual float[] GetActionMask() { return null; }

        /// <summary>Inference Heuristic: the action the game chooses itself at this decision (a
        /// human at the keyboard, a script), as the action space takes it: an int (Discrete), an
        /// int[] (MultiDiscrete) or a float[] (box); one the action mask allows. Called right
        /// after CollectObservations and GetActionMask.</summary>
        protected virtual object Heuristic()
        {
            throw new NotImplementedException(GetType().Name + " has inference Heuristic but does not override Heuristic()");
        }

        /// <summary>The gateway refused something (e.g. [unauthorized]) or cannot be reached.
        /// By default: log it, and stop the agent if the error closed the connection.</summary>
        protected virtual void OnGatewayError(RLlinkException error)
        {
            Debug.LogError("RLlink: " + error.Message);
            if (error.IsFatal) enabled = false;
        }

        /// <summary>Local inference: the runtime that runs each SET_STATE model (ONNX bytes that
        /// arrive while the game runs). By default the kit's pure-C# MlpPolicyRuntime, which runs
        /// the gateway's MLP policies; override for a runtime of your own (see the package's
        /// README.md, "Thin or local inference").</summary>
        public virtual IPolicyRuntime CreatePolicyRuntime() { return new MlpPolicyRuntime(); }

        /// <summary>
        /// Playing without a gateway: the trained policy that acts, or null to train through the
        /// gateway. By default <see cref="bundledModel"/>'s bytes run by MlpPolicyRuntime
        /// (<c>OnnxPolicy.FromBytes</c>), playing the most likely action; override to run the
        /// model with SentisPolicyRuntime (an image policy), or to set <c>Explore</c>.
        /// </summary>
        public virtual OnnxPolicy CreateBundledPolicy()
        {
            return bundledModel == null ? null : OnnxPolicy.FromBytes(bundledModel.bytes, seed);
        }

        // -- What the hooks call ------------------------------------------------------------------

        /// <summary>An environment parameter the gateway sets (its <c>env_params</c>, which a
        /// curriculum changes as the agent improves), or <paramref name="fallback"/> without one.</summary>
        public float GetEnvParam(string name, float fallback)
        {
            var config = link == null ? null : link.Config;
            return config == null ? fallback : config.GetEnvParam(name, fallback);
        }

        /// <summary>A string environment parameter, or <paramref name="fallback"/>.</summary>
        public string GetEnvParam(string name, string fallback)
        {
            var config = link == null ? null : link.Config;
            return config == null ? fallback : config.GetEnvParam(name, fallback);
        }

        /// <summary>A bool environment parameter, or <paramref name="fallback"/>.</summary>
        public bool GetEnvParam(string name, bool fallback)
        {
            var config = link == null ? null : link.Config;
            return config == null ? fallback : config.GetEnvParam(name, fallback);
        }

        /// <summary>The observation space the game declares (observationSize), or null.</summary>
        public SpaceInfo DeclaredObservationSpace()
        {
            return observationSize > 0 ? SpaceInfo.Box(observationSize) : null;
        }

        /// <summary>The action space the game declares (discreteActions or continuousActions), or null.</summary>
        public SpaceInfo DeclaredActionSpace()
        {
            if (discreteActions != null && discreteActions.Length == 1) return SpaceInfo.Discrete(discreteActions[0]);
            if (discreteActions != null && discreteActions.Length > 1) return SpaceInfo.MultiDiscrete((int[])discreteActions.Clone());
            return continuousActions > 0 ? SpaceInfo.Box(continuousActions) : null;
        }

        /// <summary>Reward for the last action (added up).</summary>
        public void AddReward(float reward)
        {
            EpisodeReturn += reward;
            if (link != null) link.AddReward(reward);
        }

        /// <summary>The episode reached a terminal state (the pole fell, the goal was reached).</summary>
        public void EndEpisode() { RequestEnd(true, false); }

        /// <summary>The episode was cut short without reaching a terminal state (a time limit).</summary>
        public void EpisodeInterrupted() { RequestEnd(false, true); }

        void RequestEnd(bool terminated, bool truncated)
        {
            ending = true;
            endTerminated |= terminated;
            endTruncated |= truncated;
        }

        // -- Unity -------------------------------------------------------------------------------

        protected virtual void OnEnable()
        {
            if (readLaunchArguments && !TakeLaunchArguments()) return;
            if (timeScale > 0 && timeScale != 1f) Time.timeScale = timeScale;
            OnnxPolicy bundled;
            try
            {
                bundled = CreateBundledPolicy();
            }
            catch (Exception e)
            {
                Debug.LogError("RLlink: cannot play the bundled model: " + e.Message);
                enabled = false;
                return;
            }
            if (bundled != null)
            {
                link = new PolicyAgentLink(bundled);
                return;
            }
            DemoRecorder recorder;
            if (!TryCreateRecorder(out recorder)) return;
            try
            {
                link = inference == InferenceMode.Heuristic && string.IsNullOrEmpty(host == null ? null : host.Trim())
                    ? new HeuristicAgentLink(Heuristic, null, null, recorder) // no gateway: the game plays, nothing is sent
                    : RLlinkConnections.Link(this, Heuristic, recorder);
            }
            catch (RLlinkException e)
            {
                if (recorder != null) recorder.Dispose();
                OnGatewayError(e);
            }
        }

        /// <summary>The recorder of a heuristic agent with recordDemosPath (else null); false (and
        /// the agent disabled, saying why) when the file cannot be written.</summary>
        bool TryCreateRecorder(out DemoRecorder recorder)
        {
            recorder = null;
            if (inference != InferenceMode.Heuristic || string.IsNullOrEmpty(recordDemosPath == null ? null : recordDemosPath.Trim())) return true;
            try
            {
                recorder = new DemoRecorder(recordDemosPath.Trim())
                {
                    AgentId = string.IsNullOrEmpty(agentId) ? null : agentId,
                    ModuleId = string.IsNullOrEmpty(moduleId) ? null : moduleId,
                };
                return true;
            }
            catch (Exception e)
            {
                if (!(e is IOException || e is UnauthorizedAccessException || e is ArgumentException || e is NotSupportedException)) throw;
                Debug.LogError("RLlink: " + e.Message);
                enabled = false;
                return false;
            }
        }

        /// <summary>Apply the gateway's --rllink-* arguments, once per player (they do not change);
        /// false (and the agent disabled) when one is malformed.</summary>
        bool TakeLaunchArguments()
        {
            if (launchArgs == null)
            {
                try
                {
                    launchArgs = LaunchArgs.FromCommandLine();
                }
                catch (ArgumentException e)
                {
                    Debug.LogError("RLlink: bad launch argument: " + e.Message);
                    enabled = false;
                    return false;
                }
            }
            if (launchArgs.Host != null) host = launchArgs.Host;
            if (launchArgs.Port.HasValue) port = launchArgs.Port.Value;
            if (launchArgs.Token != null) token = launchArgs.Token;
            if (launchArgs.TimeScale.HasValue) timeScale = launchArgs.TimeScale.Value;
            if (launchArgs.EnvIndex.HasValue && !launchIndexApplied)
            {
                seed += 1000 * launchArgs.EnvIndex.Value; // each launched game samples its own episodes
                launchIndexApplied = true;
            }
            return true;
        }

        static LaunchArgs launchArgs;
        bool launchIndexApplied;

        protected virtual void OnDisable()
        {
            if (link != null) link.Close();
            link = null;
            episodeBegun = false;
            waitingForAction = false;
        }

        protected virtual void FixedUpdate()
        {
            if (link == null) return;
            try
            {
                Step();
            }
            catch (RLlinkException e)
            {
                waitingForAction = false;
                OnGatewayError(e);
            }
        }

        void Step()
        {
            var error = link.TakeError();
            if (error != null) throw error;
            if (!link.Ready) return;
            if (ending)
            {
                link.EndEpisode(Observe(), endTerminated, endTruncated || !endTerminated);
                ending = endTerminated = endTruncated = false;
                episodeBegun = false;
                waitingForAction = false;
                CompletedEpisodes++;
            }
            if (!episodeBegun)
            {
                episodeBegun = true;
                episodeSteps = 0;
                EpisodeReturn = 0;
                fixedUpdates = 0;
                lastAction = null;
                OnEpisodeBegin();
            }
            if (waitingForAction)
            {
                AgentAction action;
                if (!link.TryTakeAction(out action)) return; // WebGL: not here yet
                Received(action);
                return;
            }
            if (fixedUpdates++ % Math.Max(1, decisionPeriod) != 0)
            {
                if (lastAction != null) OnActionReceived(lastAction);
                return;
            }
            if (maxSteps > 0 && episodeSteps >= maxSteps)
            {
                EpisodeInterrupted();
                return;
            }
            float[] obs = Observe();
            link.RequestAction(obs, GetActionMask());
            waitingForAction = true;
            AgentAction ready;
            if (link.TryTakeAction(out ready)) Received(ready);
        }

        void Received(AgentAction action)
        {
            waitingForAction = false;
            lastAction = action;
            episodeSteps++;
            OnActionReceived(action);
        }

        float[] Observe()
        {
            observations.Clear();
            CollectObservations(observations);
            return observations.ToArray();
        }
    }

    /// <summary>How an agent reaches the gateway: sockets (AgentSession) or the WebGL bridge.</summary>
    public interface IAgentLink
    {
        bool Ready { get; }
        /// <summary>Ask for the action on obs among those the mask allows (null: all).</summary>
        void RequestAction(float[] obs, float[] actionMask);
        bool TryTakeAction(out AgentAction action);
        void AddReward(float reward);
        void EndEpisode(float[] finalObs, bool terminated, bool truncated);
        /// <summary>An error that came in the background (WebGL), or null.</summary>
        RLlinkException TakeError();
        /// <summary>The gateway's SET_CONFIG (null: no gateway, or not connected yet).</summary>
        GatewayConfig Config { get; }
        /// <summary>The episode of the last action taken is an evaluation one (RLlinkAgent.IsEvaluationEpisode).</summary>
        bool IsEvaluationEpisode { get; }
        void Close();
    }

    /// <summary>An agent over a TCP connection: AgentSession, answers at once (blocking).</summary>
    public sealed class SocketAgentLink : IAgentLink
    {
        readonly AgentSession session;
        readonly Action release;
        AgentAction action;

        public SocketAgentLink(AgentSession session, Action release)
        {
            this.session = session;
            this.release = release;
        }

        public AgentSession Session { get { return session; } }
        public bool Ready { get { return true; } }
        public void RequestAction(float[] obs, float[] actionMask) { action = session.Act(obs, actionMask); }

        public bool TryTakeAction(out AgentAction taken)
        {
            taken = action;
            action = null;
            return taken != null;
        }

        public void AddReward(float reward) { session.AddReward(reward); }
        public void EndEpisode(float[] finalObs, bool terminated, bool truncated) { session.EndEpisode(finalObs, terminated, truncated); }
        public RLlinkException TakeError() { return null; }
        public GatewayConfig Config { get { return session.Client.Config; } }
        public bool IsEvaluationEpisode { get { return session.IsEvaluationEpisode; } }
        public void Close() { if (release != null) release(); }
    }

    /// <summary>An agent the game plays itself (inference Heuristic): its Heuristic() chooses
    /// each action; with a session (a gateway) each is logged with LOG_ACTION, its rewards with
    /// LOG_RETURNS, its end with END_EPISODE; without one nothing is sent. With a recorder,
    /// each finished episode is also written to its demonstrations file.</summary>
    public sealed class HeuristicAgentLink : IAgentLink
    {
        readonly Func<object> heuristic;
        readonly AgentSession session;
        readonly Action release;
        readonly DemoRecorder recorder;
        AgentAction action;

        public HeuristicAgentLink(Func<object> heuristic, AgentSession session, Action release = null, DemoRecorder recorder = null)
        {
            if (heuristic == null) throw new ArgumentNullException("heuristic");
            this.heuristic = heuristic;
            this.session = session;
            this.release = release;
            this.recorder = recorder;
        }

        public AgentSession Session { get { return session; } }
        /// <summary>The demonstrations file's recorder, or null.</summary>
        public DemoRecorder Recorder { get { return recorder; } }
        public bool Ready { get { return true; } }

        public void RequestAction(float[] obs, float[] actionMask)
        {
            object raw = heuristic();
            if (raw == null) throw new RLlinkException("invalid_action", "Heuristic() returned no action", null, null);
            if (session != null) session.Record(obs, raw, actionMask);
            if (recorder != null) recorder.Step(obs, raw, actionMask);
            action = new AgentAction(raw, session == null ? 0 : session.WeightsSeqNo);
        }

        public bool TryTakeAction(out AgentAction taken)
        {
            taken = action;
            action = null;
            return taken != null;
        }

        public void AddReward(float reward)
        {
            if (session != null) session.AddReward(reward);
            if (recorder != null) recorder.AddReward(reward);
        }

        public void EndEpisode(float[] finalObs, bool terminated, bool truncated)
        {
            if (recorder != null) recorder.EndEpisode(finalObs, terminated, truncated); // written even if the gateway is gone
            if (session != null) session.EndEpisode(finalObs, terminated, truncated);
        }

        public RLlinkException TakeError() { return null; }
        public GatewayConfig Config { get { return session == null ? null : session.Client.Config; } }
        public bool IsEvaluationEpisode { get { return false; } } // the game's own play

        public void Close()
        {
            if (recorder != null) recorder.Dispose();
            if (release != null) release();
        }
    }

    /// <summary>An agent playing a trained policy in the game itself (OnnxPolicy): no gateway,
    /// no training; rewards and episode ends stay in the game. The agent makes a new one
    /// (CreateBundledPolicy) each time it is enabled.</summary>
    public sealed class PolicyAgentLink : IAgentLink
    {
        readonly OnnxPolicy policy;
        AgentAction action;

        public PolicyAgentLink(OnnxPolicy policy)
        {
            if (policy == null) throw new ArgumentNullException("policy");
            this.policy = policy;
        }

        public OnnxPolicy Policy { get { return policy; } }
        public bool Ready { get { return true; } }
        public void RequestAction(float[] obs, float[] actionMask) { action = policy.Act(obs, actionMask); }

        public bool TryTakeAction(out AgentAction taken)
        {
            taken = action;
            action = null;
            return taken != null;
        }

        public void AddReward(float reward) { }
        public void EndEpisode(float[] finalObs, bool terminated, bool truncated) { policy.ResetState(); } // a recurrent model's memory
        public RLlinkException TakeError() { return null; }
        public GatewayConfig Config { get { return null; } }
        public bool IsEvaluationEpisode { get { return false; } }

        /// <summary>Frees the runtime if it holds resources (SentisPolicyRuntime's worker).</summary>
        public void Close()
        {
            var resources = policy.Runtime as IDisposable;
            if (resources != null) resources.Dispose();
        }
    }

    /// <summary>
    /// Connections shared by the agents of a scene: one per gateway in thin mode (the
    /// gateway batches their GET_ACTIONs into one forward pass), one per agent in local mode
    /// (each trades its own experience for the next policy).
    /// </summary>
    public static class RLlinkConnections
    {
        sealed class Shared
        {
            public RLlinkClient Client;
            public int Users;
        }

        static readonly Dictionary<string, Shared> clients = new Dictionary<string, Shared>();

        /// <summary>The link of an agent to its gateway; <paramref name="heuristic"/> chooses the
        /// actions of an agent with inference Heuristic, and <paramref name="recorder"/> (optional)
        /// writes its episodes as demonstrations.</summary>
        public static IAgentLink Link(RLlinkAgent agent, Func<object> heuristic, DemoRecorder recorder = null)
        {
#if UNITY_WEBGL && !UNITY_EDITOR
            // The bridge speaks thin mode only: a heuristic agent plays there without logging.
            if (agent.inference == InferenceMode.Heuristic) return new HeuristicAgentLink(heuristic, null, null, recorder);
            return new WebGLAgentLink(agent.host, agent.token, agent.rllinkModuleUrl,
                Nullable(agent.agentId), Nullable(agent.moduleId), agent.explore, agent.trainingEnabled);
#else
            var options = ClientOptions(agent);
            string key = options.Host + ":" + options.Port + "|" + options.UseTls + "|" + options.Token + "|" + options.DeclaredModuleId + "|"
                + (options.ObservationSpace == null ? "" : Json.Serialize(options.ObservationSpace)) + "|"
                + (options.ActionSpace == null ? "" : Json.Serialize(options.ActionSpace));
            RLlinkClient client;
            Action release;
            if (agent.inference != InferenceMode.Local) // thin and heuristic agents share a connection
            {
                Shared shared;
                if (!clients.TryGetValue(key, out shared))
                {
                    shared = new Shared { Client = new RLlinkClient(options) };
                    clients[key] = shared;
                }
                shared.Users++;
                client = shared.Client;
                release = () =>
                {
                    if (--shared.Users > 0) return;
                    shared.Client.Close();
                    clients.Remove(key);
                };
            }
            else
            {
                client = new RLlinkClient(options);
                release = client.Close;
            }
            if (client.Config == null) client.Connect();
            var runtime = agent.inference == InferenceMode.Local ? agent.CreatePolicyRuntime() : null;
            var session = new AgentSession(client, agent.inference, runtime, agent.seed)
            {
                AgentId = Nullable(agent.agentId),
                ModuleId = Nullable(agent.moduleId),
                Explore = agent.explore,
                TrainingEnabled = agent.trainingEnabled,
            };
            if (agent.inference == InferenceMode.Heuristic) return new HeuristicAgentLink(heuristic, session, release, recorder);
            return new SocketAgentLink(session, release);
#endif
        }

        /// <summary>How the agent connects over TCP (Play mode, players other than WebGL, the
        /// inspector's Test connection): its host (a WebGL URL's host), port, token, TLS and the
        /// spaces it declares.</summary>
        public static RLlinkClientOptions ClientOptions(RLlinkAgent agent)
        {
            var observations = agent.DeclaredObservationSpace();
            var actions = agent.DeclaredActionSpace();
            return new RLlinkClientOptions
            {
                Host = RLlinkAgentSettings.TcpHost(agent.host), // a WebGL URL (ws://host:8000/rllink) in the editor: its host
                Port = agent.port,
                Token = Nullable(agent.token),
                UseTls = agent.useTls,
                Log = line => Debug.Log("RLlink: " + line),
                ObservationSpace = observations == null ? null : observations.ToJson(),
                ActionSpace = actions == null ? null : actions.ToJson(),
                DeclaredModuleId = Nullable(agent.moduleId),
            };
        }

        static string Nullable(string text) { return string.IsNullOrEmpty(text) ? null : text; }
    }
}
