// A pure-C# IPolicyRuntime for the gateway's MLP policies (vector observations): it reads
// the ONNX protobuf itself and runs its Gemm, Tanh and Flatten nodes, and the Sub, Mul
// and Add that apply an action mask (also MatMul, Relu, Sigmoid, Identity), which is all
// such a policy holds; and a recurrent module's LSTM step, written out in Slice (int64
// initializer inputs), Gemm, Add, Sigmoid, Tanh, Mul and Concat, with its second input
// state_in and output state_out (IRecurrentPolicyRuntime). No package, no native code: it
// runs in the Unity editor and every player (WebGL and consoles included), in mono and
// .NET. A model with any other operator (the Conv of a policy on camera images) is refused
// at Load with its name: play in thin mode then (or, for a model bundled with the game,
// SentisPolicyRuntime).
//
// Two ways in:
// - Load(bytes, names, shape): each SET_STATE's model, with the names SET_CONFIG gives
//   (AgentSession calls it during training);
// - MlpPolicyRuntime.FromFile(path) / FromBytes(bytes): a model on its own, with no
//   gateway (a trained policy bundled with the game: the gateway's GET /api/model.onnx):
//   the input names and the observation shape come from the model itself.

using System;
using System.Collections.Generic;
using System.IO;
using System.Text;

namespace RLlink
{
    public sealed class MlpPolicyRuntime : IRecurrentPolicyRuntime, INoiseFreePolicyRuntime
    {
        sealed class Tensor
        {
            public int[] Shape;
            public float[] Data;
            public int DataType = 1; // ONNX's FLOAT; an initializer of another type has no Data
            public long[] Ints;      // an INT64 initializer's values (Slice's starts, ends, axes, steps)
            public Tensor(int[] shape, float[] data) { Shape = shape; Data = data; }
        }

        sealed class Node
        {
            public string OpType;
            public List<string> Inputs = new List<string>();
            public List<string> Outputs = new List<string>();
            public Dictionary<string, double> Attributes = new Dictionary<string, double>();
            public double Attr(string name, double fallback)
            {
                double value;
                return Attributes.TryGetValue(name, out value) ? value : fallback;
            }
        }

        static readonly HashSet<string> Supported = new HashSet<string>
        {
            "Gemm", "Tanh", "Flatten", "MatMul", "Add", "Sub", "Mul", "Relu", "Sigmoid", "Identity", "Slice", "Concat",
        };

        List<Node> nodes = new List<Node>();
        Dictionary<string, Tensor> initializers = new Dictionary<string, Tensor>();
        List<string> graphInputs = new List<string>();
        Dictionary<string, int[]> graphInputShapes = new Dictionary<string, int[]>();
        string inputName, outputName, maskInputName;
        string stateInputName, stateOutputName; // a recurrent model's state_in and state_out, else null
        bool hasNoiseFreeOutput; // a gSDE actor's exploring model: its second output, without the noise
        int stateSize;
        int[] observationShape;

        /// <summary>Metadata of the loaded model (weights_seq_no, spaces, output_layout, ...).</summary>
        public Dictionary<string, string> Metadata { get; private set; }

        /// <summary>The observation input's name (the gateway's onnx_input_name, "obs" by default).</summary>
        public string InputName { get { return inputName; } }
        /// <summary>The action mask input's name, or null for a model without one.</summary>
        public string ActionMaskInputName { get { return maskInputName; } }
        /// <summary>The output that Run returns (output 0, action_dist_inputs).</summary>
        public string OutputName { get { return outputName; } }
        /// <summary>The recurrent state's input (<c>state_in</c>), or null for a model without memory.</summary>
        public string StateInputName { get { return stateInputName; } }
        /// <summary>The recurrent state's output (<c>state_out</c>), or null for a model without memory.</summary>
        public string StateOutputName { get { return stateOutputName; } }
        /// <summary>The width of the recurrent state (<c>state_in</c> [batch, StateSize]); 0: the model has none.</summary>
        public int StateSize { get { return stateSize; } }
        /// <summary>The shape of one observation (Run takes it flattened).</summary>
        public int[] ObservationShape { get { return observationShape == null ? null : (int[])observationShape.Clone(); } }

        public MlpPolicyRuntime() { Metadata = new Dictionary<string, string>(); }

        /// <summary>
        /// A model from its ONNX file alone, with no gateway: e.g. the gateway's export
        /// (<c>GET /api/model.onnx</c>) bundled with the game, for inference only. The
        /// observation input is the model's first input (its metadata's <c>input_name</c>),
        /// the action mask its second, if any; the observation shape is the first input's,
        /// less the batch axis (or the metadata's <c>observation_space</c>).
        /// </summary>
        public static MlpPolicyRuntime FromFile(string path)
        {
            return FromBytes(File.ReadAllBytes(path));
        }

        /// <summary>As <see cref="FromFile"/>, from the file's bytes (a Unity TextAsset's
        /// <c>bytes</c>: name the file <c>model.onnx.bytes</c>, or a download).</summary>
        public static MlpPolicyRuntime FromBytes(byte[] onnxModel)
        {
            if (onnxModel == null || onnxModel.Length == 0) throw new ArgumentException("no ONNX model: the bytes are empty");
            var runtime = new MlpPolicyRuntime();
            runtime.Load(onnxModel, null, null, null, null);
            runtime.DescribeFromModel();
            return runtime;
        }

        /// <summary>Input names and observation shape from the loaded model itself.</summary>
        void DescribeFromModel()
        {
            if (graphInputs.Count == 0) throw new InvalidDataException("the ONNX model declares no input");
            string name;
            inputName = Metadata.TryGetValue("input_name", out name) && graphInputs.Contains(name) ? name : graphInputs[0];
            maskInputName = null;
            foreach (string input in graphInputs)
                if (input != inputName && input != stateInputName) { maskInputName = input; break; }
            int expected = 2 + (stateInputName != null ? 1 : 0);
            if (graphInputs.Count > expected)
                throw new NotSupportedException("the model has " + graphInputs.Count + " inputs; a policy has its observation and, with action masking,"
                    + " the mask (and, with memory, state_in)");
            int[] dims;
            observationShape = null;
            if (graphInputShapes.TryGetValue(inputName, out dims) && dims.Length >= 2)
            {
                var shape = new int[dims.Length - 1];
                Array.Copy(dims, 1, shape, 0, shape.Length);
                if (Array.TrueForAll(shape, d => d > 0)) observationShape = shape;
            }
            string space;
            if (observationShape == null && Metadata.TryGetValue("observation_space", out space))
            {
                var parsed = SpaceInfo.FromJson(Json.ParseObject(space));
                if (parsed != null && parsed.Shape.Length > 0) observationShape = parsed.Shape;
            }
            if (observationShape == null)
                throw new InvalidDataException("the model's input '" + inputName + "' has no fixed observation shape"
                    + " (and no observation_space in its metadata): load it with Load(bytes, inputName, outputNames, observationShape)");
        }

        public void Load(byte[] onnxModel, string inputName, string[] outputNames, int[] observationShape)
        {
            Load(onnxModel, inputName, outputNames, observationShape, null);
        }

        /// <summary>A model; <paramref name="actionMaskInputName"/>: its second input, the action
        /// mask (SET_CONFIG's onnx_action_mask_input_name), or null.</summary>
        public void Load(byte[] onnxModel, string inputName, string[] outputNames, int[] observationShape, string actionMaskInputName)
        {
            var newNodes = new List<Node>();
            var newInitializers = new Dictionary<string, Tensor>();
            var metadata = new Dictionary<string, string>();
            var inputs = new List<string>();
            var inputShapes = new Dictionary<string, int[]>();
            var graphOutputs = new List<string>();
            var model = new ProtoReader(onnxModel);
            while (model.Next())
            {
                if (model.Field == 7) ReadGraph(model.Bytes(), newNodes, newInitializers, inputs, inputShapes, graphOutputs);
                else if (model.Field == 14) ReadMetadata(model.Bytes(), metadata);
                else model.Skip();
            }
            if (newNodes.Exists(node => node.OpType == "Conv"))
                throw new NotSupportedException("MlpPolicyRuntime runs MLP policies on vector observations; this model has a Conv node"
                    + " (a policy on camera images or grids): train it in thin mode; a trained one bundled with the game can run with"
                    + " Unity Sentis / Inference Engine (SentisPolicyRuntime)");
            foreach (var node in newNodes)
            {
                if (Supported.Contains(node.OpType)) continue;
                throw new NotSupportedException("MlpPolicyRuntime runs Gemm/Tanh/Flatten MLP policies (and their action mask's Sub/Mul/Add,"
                    + " their LSTM step's Slice/Sigmoid/Mul/Add/Concat); this model has a "
                    + node.OpType + " node: train it in thin mode; a trained one bundled with the game can run with"
                    + " Unity Sentis / Inference Engine (SentisPolicyRuntime)");
            }
            foreach (var initializer in newInitializers)
                if (initializer.Value.DataType != 1 && initializer.Value.DataType != 7)
                    throw new NotSupportedException("tensor " + initializer.Key + " is not float32 (ONNX data type " + initializer.Value.DataType + ")");
            foreach (var node in newNodes)
                for (int i = 0; i < node.Inputs.Count; i++)
                {
                    Tensor t;
                    if (!newInitializers.TryGetValue(node.Inputs[i], out t) || t.DataType == 1 || node.OpType == "Slice" && i >= 1) continue;
                    throw new NotSupportedException("tensor " + node.Inputs[i] + " is int64, an input of a " + node.OpType
                        + " node: MlpPolicyRuntime takes int64 tensors only as Slice's starts, ends, axes and steps");
                }
            inputs.RemoveAll(newInitializers.ContainsKey); // old exporters list initializers as inputs too
            string newStateInput = inputs.Contains(StateInput) ? StateInput : null;
            string newStateOutput = graphOutputs.Contains(StateOutput) ? StateOutput : null;
            if ((newStateInput == null) != (newStateOutput == null))
                throw new NotSupportedException("a recurrent policy has both the input " + StateInput + " and the output " + StateOutput
                    + "; this model has only " + (newStateInput ?? newStateOutput));
            int newStateSize = 0;
            if (newStateInput != null)
            {
                int[] dims;
                string declared;
                if (metadata.TryGetValue("state_size", out declared)) int.TryParse(declared, out newStateSize);
                if (newStateSize <= 0 && inputShapes.TryGetValue(newStateInput, out dims) && dims.Length == 2) newStateSize = dims[1];
                if (newStateSize <= 0)
                    throw new InvalidDataException("the model's " + StateInput + " has no fixed size (and no state_size in its metadata)");
            }
            this.nodes = newNodes;
            this.initializers = newInitializers;
            this.graphInputs = inputs;
            this.graphInputShapes = inputShapes;
            this.inputName = inputName;
            this.maskInputName = actionMaskInputName;
            this.outputName = outputNames != null && outputNames.Length > 0 ? outputNames[0] : graphOutputs[0];
            this.observationShape = observationShape;
            this.stateInputName = newStateInput;
            this.stateOutputName = newStateOutput;
            this.stateSize = newStateSize;
            this.hasNoiseFreeOutput = graphOutputs.Contains(NoiseFreeOutput);
            Metadata = metadata;
        }

        /// <summary>The gateway's names of a recurrent model's state input and output (RLLINK.md).</summary>
        public const string StateInput = "state_in", StateOutput = "state_out";

        /// <summary>A gSDE actor's second output: output 0 without this version's exploration noise.</summary>
        public const string NoiseFreeOutput = "action_dist_inputs_noise_free";

        /// <summary>true: Run gives <see cref="NoiseFreeOutput"/> where the model has it (an evaluation
        /// episode of a gSDE module plays its mode); else, and by default, output 0.</summary>
        public bool PlayNoiseFree { get; set; }

        public float[] Run(float[] observation)
        {
            return Run(observation, null);
        }

        /// <summary>Output 0 for one observation and its action mask (a masked model's second input;
        /// null for a model without one).</summary>
        public float[] Run(float[] observation, float[] actionMask)
        {
            if (stateInputName != null)
                throw new InvalidOperationException("the model is recurrent (its input " + stateInputName + ", " + stateSize
                    + " floats): Run(observation, actionMask, stateIn, out stateOut), zeros at an episode's start, then each step's stateOut");
            float[] stateOut;
            return Run(observation, actionMask, null, out stateOut);
        }

        /// <summary>Output 0 for one observation, its action mask (null for a model without one)
        /// and, for a recurrent model, the state before the step (<see cref="StateSize"/> floats:
        /// zeros at an episode's start, then the last step's <paramref name="stateOut"/>);
        /// <paramref name="stateOut"/>: the state after it (null for a model without memory).</summary>
        public float[] Run(float[] observation, float[] actionMask, float[] stateIn, out float[] stateOut)
        {
            stateOut = null;
            if (nodes.Count == 0) throw new InvalidOperationException("no model loaded");
            if (stateInputName == null && stateIn != null)
                throw new InvalidOperationException("a state for a model without memory (no " + StateInput + " input)");
            if (stateInputName != null && (stateIn == null || stateIn.Length != stateSize))
                throw new ArgumentException("the model's " + stateInputName + " takes " + stateSize + " floats (zeros at an episode's start); got "
                    + (stateIn == null ? "none" : stateIn.Length.ToString()));
            var shape = new int[observationShape.Length + 1];
            shape[0] = 1;
            Array.Copy(observationShape, 0, shape, 1, observationShape.Length);
            var values = new Dictionary<string, Tensor>(initializers);
            values[inputName] = new Tensor(shape, observation);
            if (actionMask != null)
            {
                if (maskInputName == null)
                    throw new InvalidOperationException("an action mask for a model loaded without a mask input (Load's actionMaskInputName)");
                values[maskInputName] = new Tensor(new[] { 1, actionMask.Length }, actionMask);
            }
            if (stateIn != null) values[stateInputName] = new Tensor(new[] { 1, stateIn.Length }, (float[])stateIn.Clone());
            foreach (string input in graphInputs)
                if (!values.ContainsKey(input))
                    throw new InvalidOperationException("the model's input '" + input + "' was not given"
                        + (input == maskInputName || maskInputName == null && graphInputs.Count > 1
                            ? ": it is the action mask of a module with action_masking; Run(observation, actionMask) (all ones: nothing forbidden)"
                            : ""));
            foreach (var node in nodes)
            {
                Tensor result = Evaluate(node, values);
                values[node.Outputs[0]] = result;
            }
            Tensor output;
            string played = PlayNoiseFree && hasNoiseFreeOutput ? NoiseFreeOutput : outputName;
            if (!values.TryGetValue(played, out output))
                throw new InvalidOperationException("the model computed no output named " + played);
            if (stateOutputName != null)
            {
                Tensor state;
                if (!values.TryGetValue(stateOutputName, out state) || state.Data.Length != stateSize)
                    throw new InvalidOperationException("the model computed no " + stateOutputName + " of " + stateSize + " floats");
                stateOut = state.Data;
            }
            return output.Data;
        }

        static Tensor Evaluate(Node node, Dictionary<string, Tensor> values)
        {
            Func<int, Tensor> input = i =>
            {
                Tensor t;
                if (i >= node.Inputs.Count || node.Inputs[i] == "" || !values.TryGetValue(node.Inputs[i], out t)) return null;
                return t;
            };
            switch (node.OpType)
            {
                case "Gemm":
                    return Gemm(input(0), input(1), input(2), (float)node.Attr("alpha", 1), (float)node.Attr("beta", 1),
                        node.Attr("transA", 0) != 0, node.Attr("transB", 0) != 0);
                case "MatMul":
                    return Gemm(input(0), input(1), null, 1, 0, false, false);
                case "Add":
                    return Broadcast(input(0), input(1), (a, b) => a + b);
                case "Sub":
                    return Broadcast(input(0), input(1), (a, b) => a - b);
                case "Mul":
                    return Broadcast(input(0), input(1), (a, b) => a * b);
                case "Tanh":
                    return Map(input(0), x => (float)Math.Tanh(x));
                case "Relu":
                    return Map(input(0), x => x > 0 ? x : 0);
                case "Sigmoid":
                    return Map(input(0), x => (float)(1.0 / (1.0 + Math.Exp(-x))));
                case "Identity":
                    return input(0);
                case "Slice":
                    return Slice(input(0), input(1), input(2), input(3), input(4));
                case "Concat":
                {
                    var parts = new List<Tensor>();
                    for (int i = 0; i < node.Inputs.Count; i++) parts.Add(input(i));
                    return Concat(parts, (int)node.Attr("axis", 0));
                }
                case "Flatten":
                {
                    Tensor x = input(0);
                    int axis = (int)node.Attr("axis", 1);
                    if (axis < 0) axis += x.Shape.Length;
                    int outer = 1, inner = 1;
                    for (int i = 0; i < x.Shape.Length; i++) { if (i < axis) outer *= x.Shape[i]; else inner *= x.Shape[i]; }
                    return new Tensor(new[] { outer, inner }, x.Data);
                }
                default:
                    throw new NotSupportedException(node.OpType);
            }
        }

        /// <summary>ONNX's Slice (opset 13): starts, ends and the optional axes and steps as int64
        /// tensors; negative indices count from the end, out-of-range ones are clamped; steps &gt; 0.</summary>
        static Tensor Slice(Tensor x, Tensor starts, Tensor ends, Tensor axes, Tensor steps)
        {
            if (x == null || starts == null || ends == null || starts.Ints == null || ends.Ints == null
                || axes != null && axes.Ints == null || steps != null && steps.Ints == null)
                throw new NotSupportedException("Slice with starts, ends, axes and steps as int64 initializers only");
            int rank = x.Shape.Length;
            var begin = new int[rank];
            var stride = new int[rank];
            var shape = (int[])x.Shape.Clone();
            for (int axis = 0; axis < rank; axis++) stride[axis] = 1;
            for (int i = 0; i < starts.Ints.Length; i++)
            {
                int axis = axes == null ? i : (int)axes.Ints[i];
                if (axis < 0) axis += rank;
                if (axis < 0 || axis >= rank) throw new InvalidOperationException("Slice: axis out of range for rank " + rank);
                long step = steps == null ? 1 : steps.Ints[i];
                if (step <= 0) throw new NotSupportedException("Slice with a step of " + step + " (only positive steps)");
                long dim = x.Shape[axis], start = starts.Ints[i], end = ends.Ints[i];
                if (start < 0) start += dim;
                if (end < 0) end += dim;
                start = Math.Max(0, Math.Min(dim, start));
                end = Math.Max(0, Math.Min(dim, end));
                begin[axis] = (int)start;
                stride[axis] = (int)step;
                shape[axis] = end > start ? (int)((end - start + step - 1) / step) : 0;
            }
            var inputStrides = new int[rank];
            for (int axis = rank - 1, size = 1; axis >= 0; size *= x.Shape[axis], axis--) inputStrides[axis] = size;
            int count = 1;
            foreach (int d in shape) count *= d;
            var y = new float[count];
            var index = new int[rank];
            for (int i = 0; i < count; i++)
            {
                int offset = 0;
                for (int axis = 0; axis < rank; axis++) offset += (begin[axis] + index[axis] * stride[axis]) * inputStrides[axis];
                y[i] = x.Data[offset];
                for (int axis = rank - 1; axis >= 0 && ++index[axis] == shape[axis]; axis--) index[axis] = 0;
            }
            return new Tensor(shape, y);
        }

        /// <summary>ONNX's Concat: the tensors one after the other along <paramref name="axis"/>.</summary>
        static Tensor Concat(List<Tensor> parts, int axis)
        {
            if (parts.Count == 0 || parts.Exists(t => t == null || t.Data == null)) throw new InvalidOperationException("Concat of a missing or non-float tensor");
            int rank = parts[0].Shape.Length;
            if (axis < 0) axis += rank;
            if (axis < 0 || axis >= rank) throw new InvalidOperationException("Concat: axis out of range for rank " + rank);
            var shape = (int[])parts[0].Shape.Clone();
            shape[axis] = 0;
            foreach (var t in parts)
            {
                if (t.Shape.Length != rank) throw new InvalidOperationException("Concat of tensors of different ranks");
                for (int d = 0; d < rank; d++)
                    if (d != axis && t.Shape[d] != parts[0].Shape[d]) throw new InvalidOperationException("Concat of tensors whose shapes differ off its axis");
                shape[axis] += t.Shape[axis];
            }
            int outer = 1;
            for (int d = 0; d < axis; d++) outer *= shape[d];
            int total = 1;
            foreach (int d in shape) total *= d;
            var y = new float[total];
            int pos = 0;
            for (int o = 0; o < outer; o++)
                foreach (var t in parts)
                {
                    int block = t.Data.Length / Math.Max(outer, 1);
                    Array.Copy(t.Data, o * block, y, pos, block);
                    pos += block;
                }
            return new Tensor(shape, y);
        }

        static Tensor Gemm(Tensor a, Tensor b, Tensor c, float alpha, float beta, bool transA, bool transB)
        {
            if (a.Shape.Length != 2 || b.Shape.Length != 2) throw new NotSupportedException("Gemm/MatMul of 2-D tensors only");
            int m = transA ? a.Shape[1] : a.Shape[0], k = transA ? a.Shape[0] : a.Shape[1];
            int kb = transB ? b.Shape[1] : b.Shape[0], n = transB ? b.Shape[0] : b.Shape[1];
            if (k != kb) throw new InvalidOperationException("Gemm: inner sizes " + k + " and " + kb + " differ (observation of the wrong size?)");
            var y = new float[m * n];
            for (int row = 0; row < m; row++)
                for (int col = 0; col < n; col++)
                {
                    double sum = 0;
                    for (int i = 0; i < k; i++)
                    {
                        float av = transA ? a.Data[i * m + row] : a.Data[row * k + i];
                        float bv = transB ? b.Data[col * k + i] : b.Data[i * n + col];
                        sum += (double)av * bv;
                    }
                    double bias = 0;
                    if (c != null)
                    {
                        if (c.Data.Length == 1) bias = c.Data[0];
                        else if (c.Data.Length == n) bias = c.Data[col];
                        else bias = c.Data[row * n + col];
                    }
                    y[row * n + col] = (float)(alpha * sum + beta * bias);
                }
            return new Tensor(new[] { m, n }, y);
        }

        /// <summary>An elementwise operator on two tensors, broadcast as numpy (and ONNX) do;
        /// each result rounded to float32, as onnxruntime computes it.</summary>
        static Tensor Broadcast(Tensor a, Tensor b, Func<float, float, float> f)
        {
            int rank = Math.Max(a.Shape.Length, b.Shape.Length);
            var shape = new int[rank];
            var strideA = new int[rank];
            var strideB = new int[rank];
            int sa = 1, sb = 1;
            for (int axis = rank - 1; axis >= 0; axis--)
            {
                int ia = axis - (rank - a.Shape.Length), ib = axis - (rank - b.Shape.Length);
                int da = ia >= 0 ? a.Shape[ia] : 1, db = ib >= 0 ? b.Shape[ib] : 1;
                if (da != db && da != 1 && db != 1)
                    throw new InvalidOperationException("cannot broadcast shapes [" + string.Join(",", Array.ConvertAll(a.Shape, d => d.ToString()))
                        + "] and [" + string.Join(",", Array.ConvertAll(b.Shape, d => d.ToString())) + "] (an action mask of the wrong size?)");
                shape[axis] = Math.Max(da, db);
                strideA[axis] = da == 1 ? 0 : sa;
                strideB[axis] = db == 1 ? 0 : sb;
                sa *= da;
                sb *= db;
            }
            int size = 1;
            foreach (int d in shape) size *= d;
            var y = new float[size];
            var index = new int[rank];
            for (int i = 0; i < size; i++)
            {
                int offsetA = 0, offsetB = 0;
                for (int axis = 0; axis < rank; axis++) { offsetA += index[axis] * strideA[axis]; offsetB += index[axis] * strideB[axis]; }
                y[i] = f(a.Data[offsetA], b.Data[offsetB]);
                for (int axis = rank - 1; axis >= 0 && ++index[axis] == shape[axis]; axis--) index[axis] = 0;
            }
            return new Tensor(shape, y);
        }

        static Tensor Map(Tensor x, Func<float, float> f)
        {
            var y = new float[x.Data.Length];
            for (int i = 0; i < y.Length; i++) y[i] = f(x.Data[i]);
            return new Tensor(x.Shape, y);
        }

        // -- The ONNX protobuf, as far as these models need it ------------------------------

        static void ReadGraph(byte[] bytes, List<Node> nodes, Dictionary<string, Tensor> initializers, List<string> inputs,
            Dictionary<string, int[]> inputShapes, List<string> outputs)
        {
            var graph = new ProtoReader(bytes);
            while (graph.Next())
            {
                switch (graph.Field)
                {
                    case 1: nodes.Add(ReadNode(graph.Bytes())); break;
                    case 5:
                    {
                        string name;
                        var tensor = ReadTensor(graph.Bytes(), out name);
                        initializers[name] = tensor;
                        break;
                    }
                    case 11:
                    case 12:
                    {
                        // ValueInfoProto: name (1), type (2)
                        var into = graph.Field == 11 ? inputs : outputs;
                        var info = new ProtoReader(graph.Bytes());
                        string name = null;
                        int[] shape = null;
                        while (info.Next())
                        {
                            if (info.Field == 1) name = info.String();
                            else if (info.Field == 2) shape = ReadTensorTypeShape(info.Bytes());
                            else info.Skip();
                        }
                        if (name == null) break;
                        into.Add(name);
                        if (graph.Field == 11 && shape != null) inputShapes[name] = shape;
                        break;
                    }
                    default: graph.Skip(); break;
                }
            }
        }

        /// <summary>A TypeProto's tensor shape: each dim's size, -1 for a symbolic one (the batch
        /// axis); null when the type is not a tensor or has no shape.</summary>
        static int[] ReadTensorTypeShape(byte[] typeProto)
        {
            var type = new ProtoReader(typeProto);
            while (type.Next())
            {
                if (type.Field != 1) { type.Skip(); continue; } // tensor_type
                var tensor = new ProtoReader(type.Bytes());
                while (tensor.Next())
                {
                    if (tensor.Field != 2) { tensor.Skip(); continue; } // shape
                    var dims = new List<int>();
                    var shape = new ProtoReader(tensor.Bytes());
                    while (shape.Next())
                    {
                        if (shape.Field != 1) { shape.Skip(); continue; } // dim
                        int size = -1;
                        var dim = new ProtoReader(shape.Bytes());
                        while (dim.Next())
                        {
                            if (dim.Field == 1) size = (int)dim.Varint(); // dim_value; dim_param (2) stays -1
                            else dim.Skip();
                        }
                        dims.Add(size);
                    }
                    return dims.ToArray();
                }
            }
            return null;
        }

        static Node ReadNode(byte[] bytes)
        {
            var node = new Node();
            var reader = new ProtoReader(bytes);
            while (reader.Next())
            {
                switch (reader.Field)
                {
                    case 1: node.Inputs.Add(reader.String()); break;
                    case 2: node.Outputs.Add(reader.String()); break;
                    case 4: node.OpType = reader.String(); break;
                    case 5:
                    {
                        var attribute = new ProtoReader(reader.Bytes());
                        string name = null;
                        double value = 0;
                        while (attribute.Next())
                        {
                            if (attribute.Field == 1) name = attribute.String();
                            else if (attribute.Field == 2) value = attribute.Float();
                            else if (attribute.Field == 3) value = attribute.Varint();
                            else attribute.Skip();
                        }
                        if (name != null) node.Attributes[name] = value;
                        break;
                    }
                    default: reader.Skip(); break;
                }
            }
            return node;
        }

        static Tensor ReadTensor(byte[] bytes, out string name)
        {
            name = null;
            var dims = new List<int>();
            var floats = new List<float>();
            var longs = new List<long>();
            byte[] raw = null;
            int dataType = 1;
            var reader = new ProtoReader(bytes);
            while (reader.Next())
            {
                switch (reader.Field)
                {
                    case 1:
                        if (reader.WireType == 2) { var packed = new ProtoReader(reader.Bytes()); while (!packed.AtEnd) dims.Add((int)packed.ReadVarint()); }
                        else dims.Add((int)reader.Varint());
                        break;
                    case 2: dataType = (int)reader.Varint(); break;
                    case 4:
                        if (reader.WireType == 2)
                        {
                            byte[] packed = reader.Bytes();
                            for (int i = 0; i + 4 <= packed.Length; i += 4) floats.Add(BitConverterLE.ToSingle(packed, i));
                        }
                        else floats.Add(reader.Float());
                        break;
                    case 7: // int64_data
                        if (reader.WireType == 2) { var packed = new ProtoReader(reader.Bytes()); while (!packed.AtEnd) longs.Add((long)packed.ReadVarint()); }
                        else longs.Add(reader.Varint());
                        break;
                    case 8: name = reader.String(); break;
                    case 9: raw = reader.Bytes(); break;
                    default: reader.Skip(); break;
                }
            }
            if (dataType == 7) // INT64: Slice's parameters
            {
                if (raw != null)
                {
                    longs.Clear();
                    for (int i = 0; i + 8 <= raw.Length; i += 8)
                        longs.Add((long)((ulong)BitConverterLE.ToUInt32(raw, i) | (ulong)BitConverterLE.ToUInt32(raw, i + 4) << 32));
                }
                return new Tensor(dims.ToArray(), null) { DataType = 7, Ints = longs.ToArray() };
            }
            if (dataType != 1) return new Tensor(dims.ToArray(), null) { DataType = dataType }; // refused by Load, after the nodes
            float[] data;
            if (raw != null)
            {
                data = new float[raw.Length / 4];
                for (int i = 0; i < data.Length; i++) data[i] = BitConverterLE.ToSingle(raw, i * 4);
            }
            else data = floats.ToArray();
            return new Tensor(dims.ToArray(), data);
        }

        static void ReadMetadata(byte[] bytes, Dictionary<string, string> metadata)
        {
            var entry = new ProtoReader(bytes);
            string key = null, value = null;
            while (entry.Next())
            {
                if (entry.Field == 1) key = entry.String();
                else if (entry.Field == 2) value = entry.String();
                else entry.Skip();
            }
            if (key != null) metadata[key] = value;
        }

        static class BitConverterLE
        {
            public static float ToSingle(byte[] bytes, int offset)
            {
                if (BitConverter.IsLittleEndian) return BitConverter.ToSingle(bytes, offset);
                var copy = new byte[4];
                Array.Copy(bytes, offset, copy, 0, 4);
                Array.Reverse(copy);
                return BitConverter.ToSingle(copy, 0);
            }

            public static uint ToUInt32(byte[] bytes, int offset)
            {
                return (uint)(bytes[offset] | bytes[offset + 1] << 8 | bytes[offset + 2] << 16 | bytes[offset + 3] << 24);
            }
        }

        /// <summary>Reads protobuf wire format: fields one at a time.</summary>
        sealed class ProtoReader
        {
            readonly byte[] data;
            int pos;
            public int Field, WireType;

            public ProtoReader(byte[] data) { this.data = data; }

            public bool AtEnd { get { return pos >= data.Length; } }

            public bool Next()
            {
                if (AtEnd) return false;
                ulong key = ReadVarint();
                Field = (int)(key >> 3);
                WireType = (int)(key & 7);
                return true;
            }

            public ulong ReadVarint()
            {
                ulong result = 0;
                int shift = 0;
                while (true)
                {
                    if (pos >= data.Length) throw new InvalidDataException("truncated ONNX protobuf");
                    byte b = data[pos++];
                    result |= (ulong)(b & 0x7f) << shift;
                    if ((b & 0x80) == 0) return result;
                    shift += 7;
                    if (shift > 63) throw new InvalidDataException("bad varint in ONNX protobuf");
                }
            }

            public long Varint() { return (long)ReadVarint(); }

            public float Float()
            {
                if (WireType != 5) throw new InvalidDataException("expected a 32-bit field");
                float value = BitConverterLE.ToSingle(data, pos);
                pos += 4;
                return value;
            }

            public byte[] Bytes()
            {
                if (WireType != 2) throw new InvalidDataException("expected a length-delimited field");
                int length = (int)ReadVarint();
                if (length < 0 || pos + length > data.Length) throw new InvalidDataException("truncated ONNX protobuf");
                var result = new byte[length];
                Buffer.BlockCopy(data, pos, result, 0, length);
                pos += length;
                return result;
            }

            public string String() { return Encoding.UTF8.GetString(Bytes()); }

            public void Skip()
            {
                switch (WireType)
                {
                    case 0: ReadVarint(); break;
                    case 1: pos += 8; break;
                    case 2: { int length = (int)ReadVarint(); pos += length; break; }
                    case 5: pos += 4; break;
                    default: throw new InvalidDataException("unsupported protobuf wire type " + WireType);
                }
            }
        }
    }
}
