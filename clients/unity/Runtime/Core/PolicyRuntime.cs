// Local inference: the hook where a game plugs in its ONNX runtime (the kit's
// MlpPolicyRuntime, onnxruntime in a .NET program, ...) for the model of each SET_STATE,
// and the sampling of actions from the model's output, as the gateway samples them.
// SET_STATE's model is ONNX bytes that arrive while the game runs; Unity's Sentis /
// Inference Engine imports ONNX only in the Editor, so SentisPolicyRuntime plays models
// bundled with the game (OnnxPolicy), not SET_STATE's.

using System;
using System.Collections.Generic;

namespace RLlink
{
    /// <summary>
    /// Runs the policy model that SET_STATE delivers. The gateway's model: input
    /// <c>inputName</c>, float32 [batch, *observation shape]; output 0
    /// (<c>action_dist_inputs</c>), float32 [batch, k]: logits (discrete; for a
    /// MultiDiscrete each sub-action's logits one after the other) or the mean then the log
    /// std of each action value (box). Opset 13, Gemm, Tanh (and Flatten for
    /// multi-dimensional observations). A module with action masking has a second input:
    /// see <see cref="IMaskedPolicyRuntime"/>; a recurrent module's carries its state:
    /// see <see cref="IRecurrentPolicyRuntime"/>.
    /// </summary>
    public interface IPolicyRuntime
    {
        /// <summary>
        /// A new model: the plain ONNX bytes (already un-base64'd and gunzipped), the names
        /// from SET_CONFIG (<c>onnx_input_name</c>, <c>onnx_output_names</c>) and the shape of
        /// one observation. Called after each SET_STATE; replace the previous model.
        /// </summary>
        void Load(byte[] onnxModel, string inputName, string[] outputNames, int[] observationShape);

        /// <summary>Output 0 of the model for one observation (flattened), flattened: k floats.</summary>
        float[] Run(float[] observation);
    }

    /// <summary>
    /// A runtime that also runs the model of a module with <c>action_masking</c> (SET_CONFIG's
    /// <c>onnx_action_mask_input_name</c> is set). That model takes a second input, the mask,
    /// float32 [batch, k] (one value per logit, 1 allowed, 0 forbidden), and outputs
    /// <c>logits + (mask - 1) * 1e8</c> (Sub, Mul, Add nodes): sampled as usual, a forbidden
    /// action's probability is 0. AgentSession needs this interface for a masked module
    /// (MlpPolicyRuntime and SentisPolicyRuntime have it).
    /// </summary>
    public interface IMaskedPolicyRuntime : IPolicyRuntime
    {
        /// <summary>As <see cref="IPolicyRuntime.Load"/>, plus the name of the mask input
        /// (<c>onnx_action_mask_input_name</c>; null: the model has none).</summary>
        void Load(byte[] onnxModel, string inputName, string[] outputNames, int[] observationShape, string actionMaskInputName);

        /// <summary>Output 0 for one observation and its action mask (k floats, 1 allowed,
        /// 0 forbidden; the model requires it: all ones when nothing is forbidden).</summary>
        float[] Run(float[] observation, float[] actionMask);
    }

    /// <summary>
    /// A runtime that also runs a recurrent module's model (the gateway's
    /// <c>model: {use_lstm: true}</c>; SET_CONFIG's <c>state_size</c> &gt; 0). That model takes
    /// a further input, <c>state_in</c>, float32 [batch, state_size], and gives a further output,
    /// <c>state_out</c>, of the same shape: feed zeros at an episode's start and each step's
    /// <c>state_out</c> as the next step's <c>state_in</c> (a new model version keeps the state).
    /// AgentSession needs this interface for a recurrent module (MlpPolicyRuntime and
    /// SentisPolicyRuntime have it).
    /// </summary>
    public interface IRecurrentPolicyRuntime : IMaskedPolicyRuntime
    {
        /// <summary>The loaded model's state size (its <c>state_in</c>'s width); 0: the model has no state.</summary>
        int StateSize { get; }

        /// <summary>Output 0 for one observation, its action mask (null for a model without
        /// one) and the state before the step (<see cref="StateSize"/> floats); <paramref name="stateOut"/>:
        /// the state after it, to feed with the next observation.</summary>
        float[] Run(float[] observation, float[] actionMask, float[] stateIn, out float[] stateOut);
    }

    /// <summary>
    /// A runtime that can play a gSDE actor's model without this version's exploration noise.
    /// The gateway's SAC with <c>sac.exploration: gsde</c> (not its default) sends a model whose
    /// output 0 carries the noise drawn for this version, and whose second output,
    /// <c>action_dist_inputs_noise_free</c>, is the same without it: evaluation episodes play
    /// that output's mode (RLLINK.md, "Evaluation episodes"). MlpPolicyRuntime has it.
    /// </summary>
    public interface INoiseFreePolicyRuntime : IPolicyRuntime
    {
        /// <summary>true: Run gives the noise-free output where the loaded model has one (else output 0).</summary>
        bool PlayNoiseFree { get; set; }
    }

    /// <summary>Turns the model's output into an action and its log-prob (rllink/action_dists.py's rules).</summary>
    public sealed class ActionSampler
    {
        readonly Random random;
        const double LogSqrt2Pi = 0.91893853320467274178; // 0.5 * log(2 pi)

        public ActionSampler(int seed) { random = new Random(seed); }

        /// <summary>
        /// Sample (or, explore false, take the most likely) action from the dist inputs.
        /// Discrete: an int action; box (gaussian): the unclipped sample as float[], which is
        /// what the gateway trains on (clip it to the space's bounds before acting:
        /// <see cref="Clip"/>). Returns the action and its log-prob. A MultiDiscrete needs
        /// its nvec: the overload that takes it.
        /// </summary>
        public object Sample(float[] distInputs, string distribution, bool explore, out float logp)
        {
            return Sample(distInputs, distribution, null, explore, out logp);
        }

        /// <summary>
        /// As above, and <c>multi_categorical</c> (a MultiDiscrete, <paramref name="nvec"/> its
        /// sizes): an int[] action, one index per sub-action, each drawn from the softmax of its
        /// own logits; its log-prob is the sum of theirs. The dist inputs of a masked model are
        /// already masked (a forbidden action's logit is about -1e8): never drawn.
        /// </summary>
        public object Sample(float[] distInputs, string distribution, int[] nvec, bool explore, out float logp)
        {
            if (distribution == "categorical") return SampleCategorical(distInputs, 0, distInputs.Length, explore, out logp);
            if (distribution == "multi_categorical") return SampleMultiCategorical(distInputs, nvec, explore, out logp);
            if (distribution == "gaussian") return SampleGaussian(distInputs, explore, out logp);
            throw new NotSupportedException("action distribution '" + distribution + "' is not one this kit samples (categorical, multi_categorical, gaussian)");
        }

        int[] SampleMultiCategorical(float[] logits, int[] nvec, bool explore, out float logp)
        {
            if (nvec == null || nvec.Length == 0) throw new ArgumentException("multi_categorical needs the MultiDiscrete's nvec");
            int total = 0;
            foreach (int n in nvec) total += n;
            if (total != logits.Length)
                throw new ArgumentException("multi_categorical: " + logits.Length + " logits for nvec summing to " + total);
            var action = new int[nvec.Length];
            double sum = 0;
            for (int i = 0, start = 0; i < nvec.Length; start += nvec[i], i++)
            {
                float partLogp;
                action[i] = SampleCategorical(logits, start, nvec[i], explore, out partLogp);
                sum += partLogp;
            }
            logp = (float)sum;
            return action;
        }

        /// <summary>An index 0..count-1 from the logits at start..start+count-1.</summary>
        int SampleCategorical(float[] logits, int start, int count, bool explore, out float logp)
        {
            double max = double.NegativeInfinity;
            for (int i = start; i < start + count; i++) max = Math.Max(max, logits[i]);
            double sum = 0;
            for (int i = start; i < start + count; i++) sum += Math.Exp(logits[i] - max);
            double logSum = max + Math.Log(sum);
            int action = 0;
            if (explore)
            {
                // The first index whose cumulative probability exceeds u (as rllink/action_dists.py,
                // the cdf scaled to end at 1): an index of probability 0 is never drawn.
                double u = random.NextDouble() * sum, cdf = 0;
                action = -1;
                for (int i = 0; i < count; i++)
                {
                    double p = Math.Exp(logits[start + i] - max);
                    if (p == 0) continue;
                    cdf += p;
                    action = i;
                    if (u < cdf) break;
                }
            }
            else
            {
                for (int i = 1; i < count; i++) if (logits[start + i] > logits[start + action]) action = i;
            }
            logp = (float)(logits[start + action] - logSum);
            return action;
        }

        float[] SampleGaussian(float[] distInputs, bool explore, out float logp)
        {
            int d = distInputs.Length / 2;
            var action = new float[d];
            double total = 0;
            for (int i = 0; i < d; i++)
            {
                double mean = distInputs[i], logStd = distInputs[d + i], std = Math.Exp(logStd);
                double noise = explore ? Normal() : 0.0;
                double a = mean + std * noise;
                action[i] = (float)a;
                double z = (action[i] - mean) / std;
                total += -0.5 * z * z - logStd - LogSqrt2Pi;
            }
            logp = (float)total;
            return action;
        }

        double Normal()
        {
            double u1 = 1.0 - random.NextDouble(), u2 = random.NextDouble();
            return Math.Sqrt(-2.0 * Math.Log(u1)) * Math.Cos(2.0 * Math.PI * u2);
        }

        /// <summary>A box action clipped to the space's bounds (what the game should act on).</summary>
        public static float[] Clip(float[] action, SpaceInfo space)
        {
            var clipped = (float[])action.Clone();
            for (int i = 0; i < clipped.Length; i++)
            {
                if (space.Low.HasValue && clipped[i] < space.Low.Value) clipped[i] = space.Low.Value;
                if (space.High.HasValue && clipped[i] > space.High.Value) clipped[i] = space.High.Value;
            }
            return clipped;
        }
    }
}
