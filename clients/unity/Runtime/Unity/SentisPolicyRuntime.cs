// An IPolicyRuntime on Unity's own inference engine: Sentis 2.x (com.unity.sentis) or, as
// Unity 6 renamed it, Inference Engine (com.unity.ai.inference, namespace
// Unity.InferenceEngine). Compiled only when one of them is installed: RLlink.Runtime's
// asmdef sets RLLINK_SENTIS through its versionDefines (and RLLINK_INFERENCE_ENGINE for
// the renamed package), so the package compiles without either.
//
// What it is for: playing a trained policy bundled with the game that the kit's
// MlpPolicyRuntime does not run (a policy on camera images: Conv), or on the GPU. Import
// the gateway's export (GET /api/model.onnx) into Assets/ (Sentis turns it into a
// ModelAsset), then, in the agent:
//
//   public ModelAsset policyModel;
//   public override OnnxPolicy CreateBundledPolicy()
//   {
//       var runtime = new SentisPolicyRuntime(policyModel);
//       return new OnnxPolicy(runtime, new SpaceInfo { Type = "discrete", N = 2 }, runtime.ActionMaskInputName != null);
//   }
//
// What it is not for: SET_STATE's models during local training. Those are ONNX bytes that
// arrive while the game runs, and Sentis imports ONNX in the Editor only (ModelLoader.Load
// takes a ModelAsset or a serialized .sentis model, not ONNX), so Load(onnxBytes, ...)
// throws NotSupportedException saying so: train in thin mode, or locally with
// MlpPolicyRuntime.
//
// Written to Sentis 2.x's documented API (ModelLoader.Load, Worker, Tensor<float>,
// Schedule, PeekOutput, ReadbackAndClone, DownloadToArray). A recurrent policy (inputs obs,
// state_in; outputs action_dist_inputs, state_out) runs through IRecurrentPolicyRuntime:
// OnnxPolicy carries its state. CI compiles it with mono
// against stand-ins of those types (clients/csharp/stubs/Sentis.cs, outside the package);
// it has never been run in Unity.

#if RLLINK_SENTIS
using System;
#if RLLINK_INFERENCE_ENGINE
using Unity.InferenceEngine;
#else
using Unity.Sentis;
#endif

namespace RLlink.Unity
{
    public sealed class SentisPolicyRuntime : IRecurrentPolicyRuntime, IDisposable
    {
        const string OnnxAtRuntime = "Unity's Sentis / Inference Engine imports ONNX in the Editor only, and SET_STATE's model is ONNX"
            + " that arrives while the game runs: train in thin mode, or locally with MlpPolicyRuntime (the gateway's MLPs);"
            + " SentisPolicyRuntime plays a model imported into the project (a ModelAsset) or a serialized .sentis file";

        readonly Worker worker;
        readonly string inputName, maskInputName, outputName, stateInputName, stateOutputName;
        readonly int[] observationShape;
        readonly int stateSize;

        /// <param name="modelAsset">the gateway's ONNX export, imported into the project</param>
        /// <param name="observationShape">one observation's shape (e.g. {3, 84, 84} for an image);
        /// null: a vector, as long as the observation Run is given</param>
        /// <param name="backend">BackendType.CPU (the default: a policy's small batches) or GPUCompute</param>
        /// <param name="stateSize">a recurrent model's state size (its metadata's state_size, SET_CONFIG's
        /// state_size); 0: read from nothing, so give it for a model with a state_in input</param>
        public SentisPolicyRuntime(ModelAsset modelAsset, int[] observationShape = null, BackendType backend = BackendType.CPU, int stateSize = 0)
            : this(ModelLoader.Load(modelAsset), observationShape, backend, stateSize)
        {
        }

        /// <summary>A loaded model (ModelLoader.Load of a ModelAsset, or of a .sentis file's
        /// path or stream). Its first input is the observation, its second, if any, the
        /// action mask; its first output the action distribution's inputs.</summary>
        public SentisPolicyRuntime(Model model, int[] observationShape = null, BackendType backend = BackendType.CPU, int stateSize = 0)
        {
            if (model == null) throw new ArgumentNullException("model");
            foreach (var input in model.inputs)
                if (input.name == MlpPolicyRuntime.StateInput) stateInputName = input.name;
            foreach (var output in model.outputs)
                if (output.name == MlpPolicyRuntime.StateOutput) stateOutputName = output.name;
            int others = model.inputs.Count - (stateInputName != null ? 1 : 0);
            if (others < 1 || others > 2)
                throw new NotSupportedException("a policy model has 1 input (the observation) or 2 (and the action mask), and state_in with memory; this one has " + model.inputs.Count);
            if (model.outputs.Count < 1) throw new NotSupportedException("the model has no output");
            if ((stateInputName == null) != (stateOutputName == null))
                throw new NotSupportedException("a recurrent policy has both the input state_in and the output state_out");
            if (stateInputName != null && stateSize <= 0)
                throw new ArgumentException("the model is recurrent (state_in): give its stateSize (the model's metadata state_size)");
            this.stateSize = stateInputName != null ? stateSize : 0;
            inputName = model.inputs[0].name;
            foreach (var input in model.inputs)
                if (input.name != inputName && input.name != stateInputName) { maskInputName = input.name; break; }
            this.inputOrder = model.inputs.ConvertAll(input => input.name);
            outputName = model.outputs[0].name;
            this.observationShape = observationShape == null ? null : (int[])observationShape.Clone();
            worker = new Worker(model, backend);
        }

        /// <summary>A model serialized to a .sentis file in the Editor (e.g. under StreamingAssets).</summary>
        public static SentisPolicyRuntime FromSentisFile(string path, int[] observationShape = null, BackendType backend = BackendType.CPU)
        {
            return new SentisPolicyRuntime(ModelLoader.Load(path), observationShape, backend);
        }

        readonly System.Collections.Generic.List<string> inputOrder;

        public string InputName { get { return inputName; } }
        /// <summary>The recurrent state's width; 0: the model has no state_in.</summary>
        public int StateSize { get { return stateSize; } }
        /// <summary>The action mask input's name, or null for a model without one.</summary>
        public string ActionMaskInputName { get { return maskInputName; } }

        /// <summary>Not supported: see the file's header (SET_STATE's ONNX at run time).</summary>
        public void Load(byte[] onnxModel, string inputName, string[] outputNames, int[] observationShape)
        {
            throw new NotSupportedException(OnnxAtRuntime);
        }

        /// <summary>Not supported: see the file's header (SET_STATE's ONNX at run time).</summary>
        public void Load(byte[] onnxModel, string inputName, string[] outputNames, int[] observationShape, string actionMaskInputName)
        {
            throw new NotSupportedException(OnnxAtRuntime);
        }

        public float[] Run(float[] observation)
        {
            return Run(observation, null);
        }

        /// <summary>Output 0 for one observation (flattened) and, for a masked model, its action
        /// mask. Blocks until the output is read back (a policy's output is a few floats).</summary>
        public float[] Run(float[] observation, float[] actionMask)
        {
            if (stateInputName != null)
                throw new InvalidOperationException("the model is recurrent (state_in): Run(observation, actionMask, stateIn, out stateOut)");
            float[] stateOut;
            return Run(observation, actionMask, null, out stateOut);
        }

        /// <summary>As <see cref="Run(float[], float[])"/>, with a recurrent model's state before the
        /// step (zeros at an episode's start); <paramref name="stateOut"/>: its state after it.</summary>
        public float[] Run(float[] observation, float[] actionMask, float[] stateIn, out float[] stateOut)
        {
            stateOut = null;
            if (observation == null) throw new ArgumentNullException("observation");
            if (stateInputName == null && stateIn != null) throw new InvalidOperationException("a state for a model without state_in");
            if (stateInputName != null && (stateIn == null || stateIn.Length != stateSize))
                throw new ArgumentException("the model's state_in takes " + stateSize + " floats; got " + (stateIn == null ? "none" : stateIn.Length.ToString()));
            if (maskInputName == null && actionMask != null)
                throw new InvalidOperationException("an action mask for a model without a mask input");
            if (maskInputName != null && actionMask == null)
                throw new InvalidOperationException("the model's input '" + maskInputName + "' is the action mask: Run(observation, actionMask) (all ones: nothing forbidden)");
            var inputs = new Tensor[inputOrder.Count];
            try
            {
                for (int i = 0; i < inputs.Length; i++)
                {
                    string name = inputOrder[i];
                    if (name == inputName) inputs[i] = new Tensor<float>(BatchOfOne(observation.Length), observation);
                    else if (name == stateInputName) inputs[i] = new Tensor<float>(new TensorShape(1, stateIn.Length), stateIn);
                    else inputs[i] = new Tensor<float>(new TensorShape(1, actionMask.Length), actionMask);
                }
                worker.Schedule(inputs); // the model's inputs in its order
                if (stateOutputName != null) stateOut = ReadOutput(stateOutputName);
                return ReadOutput(outputName);
            }
            finally
            {
                foreach (var tensor in inputs) if (tensor != null) tensor.Dispose();
            }
        }

        float[] ReadOutput(string outputName)
        {
            var output = worker.PeekOutput(outputName) as Tensor<float>; // the worker owns it
            if (output == null) throw new InvalidOperationException("the model's output '" + outputName + "' is not float32");
            using (var readable = output.ReadbackAndClone())
                return readable.DownloadToArray();
        }

        /// <summary>[1, *observationShape] (TensorShape's constructors of rank 2 to 5).</summary>
        TensorShape BatchOfOne(int length)
        {
            int[] shape = observationShape ?? new[] { length };
            int size = 1;
            foreach (int d in shape) size *= d;
            if (size != length)
                throw new ArgumentException("an observation of " + length + " values for the shape [" + string.Join(", ", Array.ConvertAll(shape, d => d.ToString())) + "]");
            switch (shape.Length)
            {
                case 1: return new TensorShape(1, shape[0]);
                case 2: return new TensorShape(1, shape[0], shape[1]);
                case 3: return new TensorShape(1, shape[0], shape[1], shape[2]);
                case 4: return new TensorShape(1, shape[0], shape[1], shape[2], shape[3]);
                default: throw new NotSupportedException("observations of rank " + shape.Length + " (1 to 4 supported)");
            }
        }

        public void Dispose()
        {
            worker.Dispose();
        }
    }
}
#endif
