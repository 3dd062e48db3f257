// A trained policy played with no gateway: the gateway's ONNX export (GET /api/model.onnx,
// or GET /api/policies/{module_id}/model.onnx) bundled with the game, run by an
// IPolicyRuntime, its output turned into an action as the gateway would turn it.
//
//   var policy = OnnxPolicy.FromFile("cartpole.onnx");      // MlpPolicyRuntime inside
//   AgentAction action = policy.Act(observation);           // the most likely action
//
// The action space comes from the model's metadata (the gateway writes action_space into
// every export); with a runtime of your own (SentisPolicyRuntime) pass it to the
// constructor. Explore is false by default: evaluation plays the most likely action.
//
// A recurrent model (inputs obs and state_in, outputs action_dist_inputs and state_out):
// the policy carries the state from Act to Act; call ResetState() when an episode starts
// (zeros), so that one episode's memory does not leak into the next.

using System;
using System.IO;

namespace RLlink
{
    public sealed class OnnxPolicy
    {
        readonly IPolicyRuntime runtime;
        readonly ActionSampler sampler;

        /// <summary>The runtime that runs the model.</summary>
        public IPolicyRuntime Runtime { get { return runtime; } }
        /// <summary>The action space the model's output is for.</summary>
        public SpaceInfo ActionSpace { get; private set; }
        /// <summary>categorical, multi_categorical or gaussian.</summary>
        public string ActionDistribution { get; private set; }
        /// <summary>The model takes an action mask (its second input).</summary>
        public bool ActionMasking { get; private set; }
        /// <summary>The policy version of the model (its metadata's weights_seq_no; 0 if unknown).</summary>
        public int WeightsSeqNo { get; private set; }
        /// <summary>false (the default): act with the most likely action; true: sample, as in training.</summary>
        public bool Explore;
        /// <summary>A recurrent model's state width (its state_in); 0: the model has no memory.</summary>
        public int StateSize { get; private set; }
        /// <summary>A recurrent model's state before the next Act (null: no memory); ResetState() zeros it.</summary>
        public float[] State { get { return state == null ? null : (float[])state.Clone(); } }
        float[] state;

        /// <param name="runtime">a runtime with the model loaded (MlpPolicyRuntime.FromFile, a SentisPolicyRuntime)</param>
        /// <param name="actionSpace">the gateway's action space for the model</param>
        /// <param name="actionMasking">the model has the action mask input (the module's action_masking)</param>
        /// <param name="seed">the sampler's seed (Explore true)</param>
        public OnnxPolicy(IPolicyRuntime runtime, SpaceInfo actionSpace, bool actionMasking = false, int weightsSeqNo = 0, int seed = 0)
        {
            if (runtime == null) throw new ArgumentNullException("runtime");
            if (actionSpace == null) throw new ArgumentNullException("actionSpace");
            if (actionMasking && !(runtime is IMaskedPolicyRuntime))
                throw new ArgumentException("a model with an action mask input needs an IMaskedPolicyRuntime; " + runtime.GetType().Name + " is not one");
            this.runtime = runtime;
            sampler = new ActionSampler(seed);
            ActionSpace = actionSpace;
            ActionDistribution = ModuleInfo.DefaultDistribution(actionSpace);
            ActionMasking = actionMasking;
            WeightsSeqNo = weightsSeqNo;
            var recurrent = runtime as IRecurrentPolicyRuntime;
            StateSize = recurrent != null ? recurrent.StateSize : 0;
            ResetState();
        }

        /// <summary>A new episode: a recurrent model's state back to zeros (nothing for one without memory).</summary>
        public void ResetState()
        {
            state = StateSize > 0 ? new float[StateSize] : null;
        }

        /// <summary>The gateway's ONNX export, run by MlpPolicyRuntime; the action space and
        /// the mask input from the model's own metadata.</summary>
        public static OnnxPolicy FromBytes(byte[] onnxModel, int seed = 0)
        {
            var runtime = MlpPolicyRuntime.FromBytes(onnxModel);
            string space, version;
            if (!runtime.Metadata.TryGetValue("action_space", out space))
                throw new InvalidDataException("the model has no action_space in its metadata (not a gateway export?):"
                    + " use new OnnxPolicy(runtime, actionSpace)");
            int weightsSeqNo = 0;
            if (runtime.Metadata.TryGetValue("weights_seq_no", out version)) int.TryParse(version, out weightsSeqNo);
            return new OnnxPolicy(runtime, SpaceInfo.FromJson(Json.ParseObject(space)), runtime.ActionMaskInputName != null, weightsSeqNo, seed);
        }

        /// <summary>As <see cref="FromBytes"/>, from a file.</summary>
        public static OnnxPolicy FromFile(string path, int seed = 0)
        {
            return FromBytes(File.ReadAllBytes(path), seed);
        }

        /// <summary>The model's output (action_dist_inputs) for one observation (and its mask);
        /// for a recurrent model, one step: the state moves on.</summary>
        public float[] DistInputs(float[] observation, float[] actionMask = null)
        {
            if (!ActionMasking)
            {
                if (actionMask != null) throw new ArgumentException("this model takes no action mask");
            }
            else if (actionMask == null)
            {
                actionMask = new float[ActionSpace.NumLogits];
                for (int i = 0; i < actionMask.Length; i++) actionMask[i] = 1f;
            }
            if (StateSize > 0)
            {
                float[] next;
                float[] output = ((IRecurrentPolicyRuntime)runtime).Run(observation, actionMask, state, out next);
                state = next;
                return output;
            }
            if (!ActionMasking) return runtime.Run(observation);
            return ((IMaskedPolicyRuntime)runtime).Run(observation, actionMask);
        }

        /// <summary>The action for one observation: an int (discrete), an int[] (multi_discrete)
        /// or a float[] clipped to the box's bounds; <paramref name="actionMask"/>: the actions
        /// allowed now (null: all), for a model with the mask input.</summary>
        public AgentAction Act(float[] observation, float[] actionMask = null)
        {
            float logp;
            object action = sampler.Sample(DistInputs(observation, actionMask), ActionDistribution, ActionSpace.Nvec, Explore, out logp);
            if (action is float[]) action = ActionSampler.Clip((float[])action, ActionSpace);
            return new AgentAction(action, WeightsSeqNo);
        }
    }
}
