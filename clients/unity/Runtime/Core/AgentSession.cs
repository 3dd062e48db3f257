// One agent's side of training, whatever the engine: call Act with each observation,
// AddReward for what the last action earned, EndEpisode when the episode is over. The
// session speaks RLlink for it, in one of two modes:
//
// - Thin: the gateway runs the policy (START_EPISODE, GET_ACTION, LOG_RETURNS,
//   END_EPISODE): one round trip per step, no model in the game.
// - Local: the game runs the policy from SET_STATE through an IPolicyRuntime (the kit's
//   MlpPolicyRuntime, or a runtime of your own), samples actions, and sends its experience every
//   env_steps_per_sample steps with EPISODES_AND_GET_STATE (RLlib's own way).
// - Heuristic: the game chooses every action itself (a human, a script) and the session
//   logs each one (START_EPISODE, LOG_ACTION, LOG_RETURNS, END_EPISODE): call Record
//   instead of Act. The gateway trains on them as on its own (off-policy for PPO).
//
// Actions: an int (Discrete), an int[] (MultiDiscrete), a float[] (Box). For a module with
// action_masking, Act takes each step's action mask (one value per logit, 1 allowed, 0
// forbidden; null: all allowed): thin mode sends it with GET_ACTION, local mode feeds it
// to the model's second input (IMaskedPolicyRuntime) and records it in the chunk.
//
// Memory (a recurrent module: the gateway's model {use_lstm: true}, SET_CONFIG's state_size
// > 0): local mode carries the agent's state through the model (IRecurrentPolicyRuntime):
// zeros at an episode's start, each step's state_out fed back as the next step's state_in,
// kept when a new model version arrives; every chunk carries state_in, the state fed with
// its first observation (what the gateway needs to train a chunk that continues an
// episode). Thin mode does not serve recurrent modules yet (the gateway refuses them).
//
// Environment parameters (the gateway's env_params: client.Config.GetEnvParam): local mode
// gets a curriculum's new values in the SET_STATEs it asks for anyway; a thin session, which
// gets no SET_STATE unasked, asks for one (GET_STATE) when an episode ends after the policy
// version changed, and a heuristic one (no ACTION tells it the version) when any episode
// ends, so the next episode starts with the new values.
//
// Evaluation episodes (the gateway's evaluation_interval N, in SET_CONFIG): every Nth episode
// of a training session is played with the distribution's mode and never trained on; the
// gateway reports its return apart and picks best.onnx from them. Local mode plays the Nth,
// 2Nth, ... episode of the session that way and marks each of its chunks `evaluation`; in
// thin mode the gateway decides (EPISODE_STARTED's `evaluation`). IsEvaluationEpisode says
// which, from an episode's first Act on; heuristic play is never one.
//
// A broken connection costs the session nothing but time: it reconnects (RLlinkClient's
// AutoReconnect). In thin mode the gateway ended the open episode as truncated, so the
// session starts a new one on the new connection and goes on; in local mode the
// experience not yet sent is sent after reconnecting.

using System;
using System.Collections.Generic;

namespace RLlink
{
    public enum InferenceMode
    {
        /// <summary>The gateway chooses every action (server-side inference).</summary>
        Thin,
        /// <summary>The game runs the downloaded ONNX policy through an IPolicyRuntime.</summary>
        Local,
        /// <summary>The game chooses every action itself (a human, a script); each is logged
        /// to the gateway with LOG_ACTION (AgentSession.Record).</summary>
        Heuristic,
    }

    public sealed class AgentSession
    {
        readonly RLlinkClient client;
        readonly IPolicyRuntime runtime;
        readonly ActionSampler sampler;

        /// <summary>Thin, Local or Heuristic.</summary>
        public InferenceMode Mode { get; private set; }
        /// <summary>The agent's id (optional; picks the module through the gateway's policy_mapping).</summary>
        public string AgentId;
        /// <summary>The module to play (optional; wins over the mapping).</summary>
        public string ModuleId;
        /// <summary>false: act with the most likely action (evaluation).</summary>
        public bool Explore = true;
        /// <summary>false: the gateway serves the episodes but does not train on them (thin mode;
        /// in local mode no experience is sent).</summary>
        public bool TrainingEnabled = true;
        /// <summary>How many times one call may reconnect before it gives up.</summary>
        public int MaxReconnects = 3;

        /// <summary>Policy version of the last action.</summary>
        public int WeightsSeqNo { get; private set; }
        public long EnvSteps { get; private set; }
        public int Episodes { get; private set; }
        public int Reconnects { get; private set; }
        /// <summary>Local mode: the SET_STATE models loaded into the runtime. A model it already
        /// runs is not loaded again (an off-policy learner's version outlasts many requests).</summary>
        public int ModelsLoaded { get; private set; }
        public ModuleInfo Module { get; private set; }
        /// <summary>The episode is an evaluation one (the gateway's evaluation_interval): played
        /// with the distribution's mode, never trained on, its return reported apart. Set at an
        /// episode's first Act (local mode: every Nth episode of this session; thin mode: as the
        /// gateway's EPISODE_STARTED says) and kept until the next episode's first Act, so it
        /// still describes an episode just ended. Always false in heuristic mode.</summary>
        public bool IsEvaluationEpisode { get; private set; }

        /// <summary>Called with each new policy version (thin mode: the first action of a new
        /// version; local mode: after loading its model).</summary>
        public event Action<int> PolicyUpdated;

        // Thin mode
        string episodeId;             // the gateway's id of the open episode
        int episodeConnection;        // the connection it was opened on
        bool actedInEpisode;          // an action exists that a reward can belong to
        float pendingReward;          // reward for the last action, not yet sent
        int paramsVersion;            // the policy version whose env_params the client holds

        // Local mode
        Dictionary<string, object> chunk;                   // the open episode's current chunk
        readonly List<Dictionary<string, object>> finished = new List<Dictionary<string, object>>();
        int stepsSinceSample;
        bool modelLoaded;
        string loadedFile;            // the SET_STATE model (base64 of its gzip) the runtime runs
        string localEpisodeId;
        float[] state;                // a recurrent module's state before the next step (null: none)

        public AgentSession(RLlinkClient client, InferenceMode mode, IPolicyRuntime runtime = null, int seed = 0)
        {
            if (mode == InferenceMode.Local && runtime == null)
                throw new ArgumentException("local inference needs an IPolicyRuntime (e.g. new MlpPolicyRuntime())");
            this.client = client;
            this.runtime = runtime;
            Mode = mode;
            sampler = new ActionSampler(seed);
        }

        public RLlinkClient Client { get { return client; } }

        /// <summary>
        /// The action for this observation. The first call of an episode starts it; each
        /// later call completes the previous step with this observation.
        /// </summary>
        public AgentAction Act(float[] obs)
        {
            return Act(obs, null);
        }

        /// <summary>
        /// The action for this observation among those <paramref name="actionMask"/> allows: one
        /// value per logit (N for Discrete(N), sum(nvec) for a MultiDiscrete, sub-action 0's
        /// first), 1 allowed, 0 forbidden, each sub-action with at least one allowed; null: all
        /// allowed. Only for a module with action_masking (<see cref="ModuleInfo.ActionMasking"/>).
        /// </summary>
        public AgentAction Act(float[] obs, float[] actionMask)
        {
            if (Mode == InferenceMode.Heuristic)
                throw new InvalidOperationException("a heuristic session does not act: Record the game's own action");
            return Mode == InferenceMode.Thin ? ActThin(obs, actionMask) : ActLocal(obs, actionMask);
        }

        /// <summary>
        /// Heuristic mode: the action the game chose itself on this observation (an int, an int[]
        /// or a float[], as <see cref="Act(float[])"/> returns them), among those the mask allows
        /// (null: all), sent with LOG_ACTION. The first call of an episode starts it.
        /// </summary>
        public void Record(float[] obs, object action, float[] actionMask)
        {
            if (Mode != InferenceMode.Heuristic) throw new InvalidOperationException("Record is for a heuristic session; call Act");
            WithThinEpisode(actionMask, () => client.LogAction(episodeId, obs, action, actionMask));
        }

        /// <summary>Reward for the last action (added up over calls).</summary>
        public void AddReward(float reward)
        {
            if (Mode != InferenceMode.Local)
            {
                pendingReward += reward;
                return;
            }
            if (chunk == null) return;
            var rewards = (List<float>)chunk["rewards"];
            if (rewards.Count > 0) rewards[rewards.Count - 1] += reward;
        }

        /// <summary>The episode is over: the final observation, and whether it reached a
        /// terminal state (terminated) or was cut by a time limit (truncated).</summary>
        public void EndEpisode(float[] finalObs, bool terminated, bool truncated)
        {
            if (!terminated && !truncated) throw new ArgumentException("an episode ends terminated, truncated or both");
            if (Mode != InferenceMode.Local) EndThin(finalObs, terminated, truncated);
            else EndLocal(finalObs, terminated, truncated);
            Episodes++;
        }

        /// <summary>Close the connection (thin: the gateway ends an open episode as truncated).</summary>
        public void Close() { client.Close(); }

        void Connected()
        {
            if (client.Config == null || (!client.IsConnected && client.Options.AutoReconnect)) client.Connect();
            Module = client.Config.ModuleFor(AgentId, ModuleId);
        }

        // -- Thin mode --------------------------------------------------------------------

        AgentAction ActThin(float[] obs, float[] actionMask)
        {
            AgentAction action = null;
            WithThinEpisode(actionMask, () => action = client.GetAction(episodeId, obs, actionMask, Explore));
            if (action.WeightsSeqNo != WeightsSeqNo)
            {
                WeightsSeqNo = action.WeightsSeqNo;
                if (PolicyUpdated != null) PolicyUpdated(WeightsSeqNo);
            }
            return action;
        }

        /// <summary>One step of a gateway-side episode (thin and heuristic modes): start the
        /// episode if none is open on this connection, send the last action's reward, then
        /// <paramref name="step"/> (GET_ACTION or LOG_ACTION); on a lost connection, reconnect
        /// and start again (the gateway ended the old episode as truncated).</summary>
        void WithThinEpisode(float[] actionMask, Action step)
        {
            for (int attempt = 0; ; attempt++)
            {
                try
                {
                    Connected();
                    CheckMask(actionMask);
                    if (episodeId != null && episodeConnection != client.ConnectionNumber)
                        episodeId = null; // the connection it lived on is gone; the gateway ended it
                    if (episodeId == null)
                    {
                        bool evaluation;
                        episodeId = client.StartEpisode(null, AgentId, ModuleId, TrainingEnabled, out evaluation);
                        IsEvaluationEpisode = evaluation && Mode == InferenceMode.Thin; // heuristic play is the game's own
                        episodeConnection = client.ConnectionNumber;
                        actedInEpisode = false;
                        pendingReward = 0;
                    }
                    if (actedInEpisode && pendingReward != 0) client.LogReturns(episodeId, pendingReward);
                    pendingReward = 0;
                    step();
                    actedInEpisode = true;
                    EnvSteps++;
                    return;
                }
                catch (RLlinkException e)
                {
                    if (e.Code != RLlinkException.ConnectionClosed || attempt >= MaxReconnects) throw;
                    Reconnects++;
                    episodeId = null;
                }
            }
        }

        void EndThin(float[] finalObs, bool terminated, bool truncated)
        {
            if (episodeId == null || episodeConnection != client.ConnectionNumber || !client.IsConnected)
            {
                episodeId = null; // nothing open on this connection: nothing to end
                return;
            }
            try
            {
                if (actedInEpisode && pendingReward != 0) client.LogReturns(episodeId, pendingReward);
                client.EndEpisode(episodeId, finalObs, terminated, truncated);
            }
            catch (RLlinkException e)
            {
                if (e.Code != RLlinkException.ConnectionClosed) throw;
                Reconnects++; // the gateway ended the episode itself; the next Act reconnects
            }
            finally
            {
                episodeId = null;
                pendingReward = 0;
            }
            if (Mode != InferenceMode.Local) RefreshEnvParams();
        }

        /// <summary>Thin and heuristic modes, between episodes: a curriculum's new env_params come
        /// only in a SET_STATE, so ask for one (GET_STATE): in thin mode once the policy version
        /// moved past the one whose values the client holds, in heuristic mode (no ACTION says
        /// the version) at every episode's end. Nothing to ask when the gateway sets no env_params.</summary>
        void RefreshEnvParams()
        {
            if (client.Config == null || client.Config.EnvParams.Count == 0) return;
            if (Mode == InferenceMode.Thin && WeightsSeqNo <= paramsVersion) return;
            if (!client.IsConnected) return; // the next connect's SET_CONFIG carries the current values
            try
            {
                paramsVersion = client.GetState().WeightsSeqNo;
                if (Mode == InferenceMode.Heuristic) WeightsSeqNo = paramsVersion; // the version it last heard of
            }
            catch (RLlinkException e)
            {
                if (e.Code != RLlinkException.ConnectionClosed) throw;
                Reconnects++; // the next Act reconnects, and its SET_CONFIG has the current values
            }
        }

        // -- Local mode ---------------------------------------------------------------------

        AgentAction ActLocal(float[] obs, float[] actionMask)
        {
            if (!modelLoaded)
            {
                WithReconnects(() =>
                {
                    Connected();
                    Load(client.GetState());
                });
            }
            CheckMask(actionMask);
            if (TrainingEnabled && stepsSinceSample >= client.Config.EnvStepsPerSample)
            {
                if (chunk != null && ((List<object>)chunk["actions"]).Count > 0)
                {
                    ((List<float[]>)chunk["obs"]).Add(obs); // completes its last step; the episode goes on
                    finished.Add(chunk);
                    chunk = NewChunk(localEpisodeId, obs);
                }
                var episodes = new List<Dictionary<string, object>>(finished);
                int steps = stepsSinceSample;
                WithReconnects(() =>
                {
                    Connected();
                    Load(client.EpisodesAndGetState(episodes, steps));
                });
                finished.Clear();
                stepsSinceSample = 0;
                if (chunk != null) chunk["weights_seq_no"] = WeightsSeqNo;
            }
            if (chunk == null)
            {
                IsEvaluationEpisode = EvaluationTurn();
                localEpisodeId = Guid.NewGuid().ToString("N");
                state = Module.Recurrent ? new float[Module.StateSize] : null; // zeros at an episode's start
                chunk = NewChunk(localEpisodeId, obs);
            }
            else if (((List<object>)chunk["actions"]).Count > 0)
            {
                ((List<float[]>)chunk["obs"]).Add(obs);
            }
            float[] distInputs;
            float[] mask = null;
            if (Module.ActionMasking)
            {
                mask = actionMask != null ? (float[])actionMask.Clone() : AllAllowed();
                ((List<float[]>)chunk["action_mask"]).Add(mask);
            }
            var noiseFree = runtime as INoiseFreePolicyRuntime;
            if (noiseFree != null) noiseFree.PlayNoiseFree = IsEvaluationEpisode; // a gSDE model's mode without its noise
            if (Module.Recurrent)
            {
                float[] next;
                distInputs = ((IRecurrentPolicyRuntime)runtime).Run(obs, mask, state, out next);
                state = next; // the next step's state_in
            }
            else if (mask != null) distInputs = ((IMaskedPolicyRuntime)runtime).Run(obs, mask);
            else distInputs = runtime.Run(obs);
            float logp;
            bool explore = Explore && !IsEvaluationEpisode; // an evaluation episode plays the mode
            object raw = sampler.Sample(distInputs, Module.ActionDistribution, Module.ActionSpace.Nvec, explore, out logp);
            ((List<object>)chunk["actions"]).Add(raw);
            ((List<float>)chunk["rewards"]).Add(0f);
            ((List<float>)chunk["action_logp"]).Add(logp);
            stepsSinceSample++;
            EnvSteps++;
            object act = raw;
            if (raw is float[]) act = ActionSampler.Clip((float[])raw, Module.ActionSpace);
            return new AgentAction(act, WeightsSeqNo, localEpisodeId);
        }

        void EndLocal(float[] finalObs, bool terminated, bool truncated)
        {
            if (chunk == null) return;
            if (((List<object>)chunk["actions"]).Count > 0)
            {
                ((List<float[]>)chunk["obs"]).Add(finalObs);
                chunk["is_terminated"] = terminated;
                chunk["is_truncated"] = truncated;
                if (TrainingEnabled) finished.Add(chunk);
            }
            chunk = null;
        }

        Dictionary<string, object> NewChunk(string id, float[] firstObs)
        {
            var newChunk = new Dictionary<string, object>
            {
                { "obs", new List<float[]> { firstObs } },
                { "actions", new List<object>() },
                { "rewards", new List<float>() },
                { "action_logp", new List<float>() },
                { "is_terminated", false },
                { "is_truncated", false },
                { "episode_id", id },
                { "weights_seq_no", WeightsSeqNo },
            };
            if (Module.ActionMasking) newChunk["action_mask"] = new List<float[]>(); // one row per action
            if (AgentId != null) newChunk["agent_id"] = AgentId;
            if (ModuleId != null) newChunk["module_id"] = ModuleId;
            if (IsEvaluationEpisode) newChunk["evaluation"] = true; // every chunk of the episode
            if (Module.Recurrent) newChunk["state_in"] = (float[])state.Clone(); // the state fed with firstObs
            return newChunk;
        }

        /// <summary>Local mode: whether the episode starting now is an evaluation one: the Nth,
        /// 2Nth, ... of this session's (N the gateway's evaluation_interval; 0: none), as the
        /// gateway chooses a thin client's. Only for experience that is sent and trained on.</summary>
        bool EvaluationTurn()
        {
            int interval = client.Config.EvaluationInterval;
            return TrainingEnabled && Module.Trainable && interval > 0 && Episodes % interval == interval - 1;
        }

        void Load(PolicyState state)
        {
            string moduleId = Module.ModuleId;
            bool own = state.OnnxFiles.Count > 0 && state.OnnxFiles.ContainsKey(moduleId);
            string packed = own ? state.OnnxFiles[moduleId] : state.OnnxFile;
            if (modelLoaded && packed == loadedFile)
            {
                WeightsSeqNo = state.WeightsSeqNo; // the same model: nothing to load
                return;
            }
            byte[] model = own ? state.OnnxModel(moduleId) : state.OnnxModel();
            if (Module.Recurrent)
            {
                var recurrent = runtime as IRecurrentPolicyRuntime;
                if (recurrent == null)
                    throw new NotSupportedException("module '" + moduleId + "' is recurrent (state_size " + Module.StateSize
                        + "): its model takes and gives a state (state_in, state_out), which " + runtime.GetType().Name
                        + " cannot carry; implement IRecurrentPolicyRuntime (MlpPolicyRuntime does)");
                recurrent.Load(model, Module.OnnxInputName, Module.OnnxOutputNames, Module.ObservationSpace.Shape, Module.OnnxActionMaskInputName);
                if (recurrent.StateSize != Module.StateSize)
                    throw new NotSupportedException("module '" + moduleId + "' has state_size " + Module.StateSize + " but its model's state_in takes "
                        + recurrent.StateSize + " floats");
            }
            else if (Module.ActionMasking)
            {
                var masked = runtime as IMaskedPolicyRuntime;
                if (masked == null)
                    throw new NotSupportedException("module '" + moduleId + "' has action_masking: its model takes a second input, '"
                        + Module.OnnxActionMaskInputName + "' (the action mask), which " + runtime.GetType().Name
                        + " cannot feed; implement IMaskedPolicyRuntime (MlpPolicyRuntime does)");
                masked.Load(model, Module.OnnxInputName, Module.OnnxOutputNames, Module.ObservationSpace.Shape, Module.OnnxActionMaskInputName);
            }
            else runtime.Load(model, Module.OnnxInputName, Module.OnnxOutputNames, Module.ObservationSpace.Shape);
            modelLoaded = true;
            loadedFile = packed;
            ModelsLoaded++;
            WeightsSeqNo = state.WeightsSeqNo;
            if (PolicyUpdated != null) PolicyUpdated(WeightsSeqNo);
        }

        /// <summary>A mask fits the module's logits (refused here, before it reaches the gateway or the model).</summary>
        void CheckMask(float[] actionMask)
        {
            if (actionMask == null) return;
            SpaceInfo space = Module.ActionSpace;
            if (!Module.ActionMasking)
                throw new ArgumentException("module '" + Module.ModuleId + "' takes no action mask: the gateway's action_masking is off for it");
            if (actionMask.Length != space.NumLogits)
                throw new ArgumentException("an action mask of " + space + " holds " + space.NumLogits + " values, one per logit; got " + actionMask.Length);
            int[] sizes = space.IsMultiDiscrete ? space.Nvec : new[] { space.N };
            for (int part = 0, start = 0; part < sizes.Length; start += sizes[part], part++)
            {
                bool any = false;
                for (int i = start; i < start + sizes[part]; i++)
                {
                    if (actionMask[i] != 0 && actionMask[i] != 1)
                        throw new ArgumentException("an action mask holds 1 (allowed) or 0 (forbidden); value " + i + " is " + actionMask[i]);
                    any |= actionMask[i] == 1;
                }
                if (!any) throw new ArgumentException("the action mask allows no action" + (sizes.Length > 1 ? " for sub-action " + part : ""));
            }
        }

        float[] AllAllowed()
        {
            var ones = new float[Module.ActionSpace.NumLogits];
            for (int i = 0; i < ones.Length; i++) ones[i] = 1f;
            return ones;
        }

        void WithReconnects(Action action)
        {
            for (int attempt = 0; ; attempt++)
            {
                try
                {
                    action();
                    return;
                }
                catch (RLlinkException e)
                {
                    if (e.Code != RLlinkException.ConnectionClosed || attempt >= MaxReconnects) throw;
                    Reconnects++;
                }
            }
        }
    }
}
