// Local inference: the hook where a game plugs in its ONNX runtime (Unity Sentis /
// Inference Engine, onnxruntime, ...) for the model of each SET_STATE, and the sampling
// of actions from the model's output, as the gateway samples them.

using System;
using System.Collections.Generic;

namespace RLlink
{
    /// <summary>
    /// Runs the policy model that SET_STATE delivers. The gateway's model: input
    /// <c>inputName</c>, float32 [batch, *observation shape]; output 0
    /// (<c>action_dist_inputs</c>), float32 [batch, k]: logits (discrete) or the mean then
    /// the log std of each action value (box). Opset 13, Gemm, Tanh (and Flatten for
    /// multi-dimensional observations).
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

    /// <summary>Turns the model's output into an action and its log-prob (app/action_dists.py's rules).</summary>
    public sealed class ActionSampler
    {
        readonly Random random;
        const double LogSqrt2Pi = 0.91893853320467274178; // 0.5 * log(2 pi)

        public ActionSampler(int seed) { random = new Random(seed); }

        /// <summary>
        /// Sample (or, explore false, take the most likely) action from the dist inputs.
        /// Discrete: an int action; box (gaussian): the unclipped sample as float[], which is
        /// what the gateway trains on (clip it to the space's bounds before acting:
        /// <see cref="Clip"/>). Returns the action and its log-prob.
        /// </summary>
        public object Sample(float[] distInputs, string distribution, bool explore, out float logp)
        {
            if (distribution == "categorical") return SampleCategorical(distInputs, explore, out logp);
            if (distribution == "gaussian") return SampleGaussian(distInputs, explore, out logp);
            throw new NotSupportedException("action distribution '" + distribution + "' is not one this kit samples (categorical, gaussian)");
        }

        int SampleCategorical(float[] logits, bool explore, out float logp)
        {
            double max = double.NegativeInfinity;
            foreach (float l in logits) max = Math.Max(max, l);
            double sum = 0;
            foreach (float l in logits) sum += Math.Exp(l - max);
            double logSum = max + Math.Log(sum);
            int action = 0;
            if (explore)
            {
                double u = random.NextDouble(), cdf = 0;
                action = logits.Length - 1;
                for (int i = 0; i < logits.Length; i++)
                {
                    cdf += Math.Exp(logits[i] - logSum);
                    if (u < cdf) { action = i; break; }
                }
            }
            else
            {
                for (int i = 1; i < logits.Length; i++) if (logits[i] > logits[action]) action = i;
            }
            logp = (float)(logits[action] - logSum);
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
