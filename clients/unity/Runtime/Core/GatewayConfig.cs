// What SET_CONFIG and SET_STATE say, as typed objects (the raw parsed JSON stays
// available as Raw).

using System;
using System.Collections.Generic;
using System.IO;
using System.IO.Compression;
using System.Text.RegularExpressions;

namespace RLlink
{
    /// <summary>An observation or action space: <c>box</c> (Shape, Low, High, Dtype), <c>discrete</c> (N)
    /// or <c>multi_discrete</c> (Nvec).</summary>
    public sealed class SpaceInfo
    {
        public string Type;        // "box", "discrete" or "multi_discrete" ("dict" observations travel flat)
        public int N;              // discrete: actions 0..N-1
        public int[] Nvec = new int[0]; // multi_discrete: sub-action i in 0..Nvec[i]-1
        public int[] Shape = new int[0];
        public float? Low, High;   // box bounds (null: unbounded)
        public string Dtype = "float32"; // box: "float32", or "uint8" for an image [C, H, W]

        public bool IsDiscrete { get { return Type == "discrete"; } }
        public bool IsMultiDiscrete { get { return Type == "multi_discrete"; } }

        /// <summary>Number of floats in one element (the flattened box), 1 for discrete, or the
        /// number of sub-actions for multi_discrete.</summary>
        public int Size
        {
            get
            {
                if (IsDiscrete) return 1;
                if (IsMultiDiscrete) return Nvec.Length;
                int size = 1;
                foreach (int d in Shape) size *= d;
                return size;
            }
        }

        /// <summary>Number of logits (and of action-mask values) of a discrete action space: N,
        /// or the sum of Nvec; 0 for a box.</summary>
        public int NumLogits
        {
            get
            {
                if (IsDiscrete) return N;
                int sum = 0;
                if (IsMultiDiscrete) foreach (int n in Nvec) sum += n;
                return sum;
            }
        }

        public static SpaceInfo FromJson(IDictionary<string, object> json)
        {
            if (json == null) return null;
            var space = new SpaceInfo
            {
                Type = Json.GetString(json, "type", "box"),
                N = Json.GetInt(json, "n"),
                Dtype = Json.GetString(json, "dtype", "float32"),
            };
            var shape = Json.GetList(json, "shape");
            if (shape != null) space.Shape = Json.ToInts(shape);
            var nvec = Json.GetList(json, "nvec");
            if (nvec != null) space.Nvec = Json.ToInts(nvec);
            object low, high;
            if (json.TryGetValue("low", out low) && low is double) space.Low = (float)(double)low;
            if (json.TryGetValue("high", out high) && high is double) space.High = (float)(double)high;
            return space;
        }

        /// <summary>A box of floats of this shape (bounds and dtype left to the gateway).</summary>
        public static SpaceInfo Box(params int[] shape) { return new SpaceInfo { Type = "box", Shape = shape }; }
        public static SpaceInfo Discrete(int n) { return new SpaceInfo { Type = "discrete", N = n }; }
        public static SpaceInfo MultiDiscrete(params int[] nvec) { return new SpaceInfo { Type = "multi_discrete", Nvec = nvec }; }

        /// <summary>The space as RLlink writes it (GET_CONFIG's declared spaces): only the fields
        /// that mean something for its type; a box's bounds only when set.</summary>
        public Dictionary<string, object> ToJson()
        {
            var json = new Dictionary<string, object> { { "type", Type } };
            if (IsDiscrete) json["n"] = N;
            else if (IsMultiDiscrete) json["nvec"] = Nvec;
            else
            {
                json["shape"] = Shape;
                if (Low.HasValue) json["low"] = Low.Value;
                if (High.HasValue) json["high"] = High.Value;
                if (Dtype != "float32") json["dtype"] = Dtype;
            }
            return json;
        }

        public override string ToString()
        {
            if (IsDiscrete) return "Discrete(" + N + ")";
            if (IsMultiDiscrete) return "MultiDiscrete([" + Join(Nvec) + "])";
            return "Box(shape [" + Join(Shape) + "]" + (Dtype == "float32" ? "" : ", " + Dtype) + ")";
        }

        static string Join(int[] values) { return string.Join(", ", Array.ConvertAll(values, d => d.ToString())); }
    }

    /// <summary>One module (policy) a client can play: one entry of SET_CONFIG's <c>policies</c>.</summary>
    public sealed class ModuleInfo
    {
        public string ModuleId;
        public SpaceInfo ObservationSpace;
        public SpaceInfo ActionSpace;
        public string OnnxInputName = "obs";
        public string[] OnnxOutputNames = { "action_dist_inputs" };
        public string ActionDistribution = "categorical"; // "categorical", "multi_categorical" (logits) or "gaussian" (mean, log std)
        /// <summary>The name of the model's second input, the action mask (SET_CONFIG's
        /// <c>onnx_action_mask_input_name</c>): set for a module with <c>action_masking</c>, else null.</summary>
        public string OnnxActionMaskInputName;
        public bool Trainable = true;
        /// <summary>SET_CONFIG's <c>state_size</c>: the width of a recurrent module's state (its
        /// model's <c>state_in</c> and <c>state_out</c>; the gateway's <c>model: {use_lstm: true}</c>);
        /// 0 for a module without memory.</summary>
        public int StateSize;

        /// <summary>The module's policy has memory: its model carries a state step to step.</summary>
        public bool Recurrent { get { return StateSize > 0; } }

        /// <summary>The module takes action masks (its model has the second input).</summary>
        public bool ActionMasking { get { return OnnxActionMaskInputName != null; } }

        internal static ModuleInfo FromJson(string moduleId, IDictionary<string, object> json)
        {
            var module = new ModuleInfo
            {
                ModuleId = moduleId,
                ObservationSpace = SpaceInfo.FromJson(Json.GetObject(json, "observation_space")),
                ActionSpace = SpaceInfo.FromJson(Json.GetObject(json, "action_space")),
                OnnxInputName = Json.GetString(json, "onnx_input_name", "obs"),
                OnnxActionMaskInputName = Json.GetString(json, "onnx_action_mask_input_name"),
                Trainable = Json.GetBool(json, "trainable", true),
                StateSize = Math.Max(0, Json.GetInt(json, "state_size", 0)),
            };
            var outputs = Json.GetList(json, "onnx_output_names");
            if (outputs != null) module.OnnxOutputNames = outputs.ConvertAll(o => (string)o).ToArray();
            module.ActionDistribution = Json.GetString(json, "action_distribution", DefaultDistribution(module.ActionSpace));
            return module;
        }

        /// <summary>How PPO's policy for this action space samples: categorical (discrete),
        /// multi_categorical (multi_discrete) or gaussian (box).</summary>
        public static string DefaultDistribution(SpaceInfo actionSpace)
        {
            return actionSpace == null || actionSpace.IsDiscrete ? "categorical"
                : actionSpace.IsMultiDiscrete ? "multi_categorical" : "gaussian";
        }
    }

    /// <summary>SET_CONFIG: how to sample, and (gateway extensions) the spaces, ONNX names and modules.</summary>
    public sealed class GatewayConfig
    {
        public int EnvStepsPerSample;
        public bool ForceOnPolicy;
        public string DefaultModuleId = "default_policy";
        public string ProtocolVersion;
        /// <summary>Every module by module_id; the default module is also <see cref="Default"/>.</summary>
        public Dictionary<string, ModuleInfo> Policies = new Dictionary<string, ModuleInfo>();
        /// <summary>agent_id glob -> module_id, in the gateway's order (the first match wins).</summary>
        public List<KeyValuePair<string, string>> PolicyMapping = new List<KeyValuePair<string, string>>();
        public Dictionary<string, object> Raw;
        /// <summary>The environment parameters the gateway sets (SET_CONFIG's <c>env_params</c>,
        /// updated by a SET_STATE that carries them): name -> a number (double), string or bool.</summary>
        public Dictionary<string, object> EnvParams = new Dictionary<string, object>();
        /// <summary>SET_CONFIG's <c>evaluation_interval</c>: a client that runs the model itself
        /// plays every Nth episode of each env as an evaluation episode (the distribution's mode,
        /// its chunks marked <c>evaluation</c>, never trained on); 0 (also when absent): none.</summary>
        public int EvaluationInterval;

        /// <summary>The default module (the unprefixed spaces and names of SET_CONFIG).</summary>
        public ModuleInfo Default;

        public static GatewayConfig FromJson(Dictionary<string, object> json)
        {
            var config = new GatewayConfig
            {
                Raw = json,
                EnvStepsPerSample = Json.GetInt(json, "env_steps_per_sample", 500),
                ForceOnPolicy = Json.GetBool(json, "force_on_policy", true),
                DefaultModuleId = Json.GetString(json, "default_module_id", "default_policy"),
                ProtocolVersion = Json.GetString(json, "protocol_version"),
                EvaluationInterval = Math.Max(0, Json.GetInt(json, "evaluation_interval", 0)),
            };
            config.Default = ModuleInfo.FromJson(config.DefaultModuleId, json);
            if (config.Default.ObservationSpace == null) // RLlib's own server sends no spaces
                config.Default.ObservationSpace = new SpaceInfo { Type = "box" };
            if (config.Default.ActionSpace == null)
                config.Default.ActionSpace = new SpaceInfo { Type = "discrete", N = 2 };
            var policies = Json.GetObject(json, "policies");
            if (policies != null)
                foreach (var entry in policies)
                    config.Policies[entry.Key] = ModuleInfo.FromJson(entry.Key, entry.Value as Dictionary<string, object>);
            if (!config.Policies.ContainsKey(config.DefaultModuleId)) config.Policies[config.DefaultModuleId] = config.Default;
            var mapping = Json.GetObject(json, "policy_mapping");
            if (mapping != null)
                foreach (var entry in mapping) config.PolicyMapping.Add(new KeyValuePair<string, string>(entry.Key, entry.Value as string));
            config.TakeEnvParams(json);
            return config;
        }

        /// <summary>Take the <c>env_params</c> of a SET_CONFIG or SET_STATE, if it has them.</summary>
        public void TakeEnvParams(IDictionary<string, object> message)
        {
            var values = Json.GetObject(message, "env_params");
            if (values != null) EnvParams = new Dictionary<string, object>(values);
        }

        /// <summary>An environment parameter as a number, or <paramref name="fallback"/> when the
        /// gateway sets none of that name (or one that is not a number).</summary>
        public float GetEnvParam(string name, float fallback)
        {
            object value;
            return EnvParams.TryGetValue(name, out value) && value is double ? (float)(double)value : fallback;
        }

        /// <summary>An environment parameter as a string (a number or bool as JSON writes it).</summary>
        public string GetEnvParam(string name, string fallback)
        {
            object value;
            if (!EnvParams.TryGetValue(name, out value) || value == null) return fallback;
            return value as string ?? Json.Serialize(value);
        }

        /// <summary>An environment parameter as a bool, or <paramref name="fallback"/>.</summary>
        public bool GetEnvParam(string name, bool fallback)
        {
            object value;
            return EnvParams.TryGetValue(name, out value) && value is bool ? (bool)value : fallback;
        }

        /// <summary>
        /// The module an agent plays, as the gateway decides: <paramref name="moduleId"/> if
        /// given, else the first policy_mapping glob matching <paramref name="agentId"/>, else
        /// the default module.
        /// </summary>
        public ModuleInfo ModuleFor(string agentId, string moduleId = null)
        {
            ModuleInfo module;
            if (moduleId != null)
            {
                if (Policies.TryGetValue(moduleId, out module)) return module;
                throw new ArgumentException("the gateway has no module '" + moduleId + "'; it has " + string.Join(", ", new List<string>(Policies.Keys).ToArray()));
            }
            if (agentId != null)
                foreach (var rule in PolicyMapping)
                    if (GlobMatches(rule.Key, agentId) && Policies.TryGetValue(rule.Value, out module)) return module;
            return Default;
        }

        static bool GlobMatches(string glob, string text)
        {
            // fnmatch: * ? [seq]; case-sensitive, as the gateway's.
            string pattern = "^" + Regex.Escape(glob).Replace(@"\*", ".*").Replace(@"\?", ".").Replace(@"\[!", "[^").Replace(@"\[", "[").Replace(@"\]", "]") + "$";
            return Regex.IsMatch(text, pattern);
        }
    }

    /// <summary>SET_STATE: the policy version and its models (base64 of gzipped ONNX).</summary>
    public sealed class PolicyState
    {
        public int WeightsSeqNo;
        /// <summary>The default module's model, as sent (base64 of the gzipped ONNX).</summary>
        public string OnnxFile;
        /// <summary>Every module's model by module_id, as sent (gateway extension).</summary>
        public Dictionary<string, string> OnnxFiles = new Dictionary<string, string>();

        public static PolicyState FromJson(Dictionary<string, object> json)
        {
            var state = new PolicyState
            {
                WeightsSeqNo = Json.GetInt(json, "weights_seq_no"),
                OnnxFile = Json.GetString(json, "onnx_file"),
            };
            var files = Json.GetObject(json, "onnx_files");
            if (files != null)
                foreach (var entry in files) state.OnnxFiles[entry.Key] = entry.Value as string;
            return state;
        }

        /// <summary>The plain ONNX bytes of a module's model (the default module's if null).</summary>
        public byte[] OnnxModel(string moduleId = null)
        {
            string packed = OnnxFile;
            if (moduleId != null && OnnxFiles.Count > 0 && !OnnxFiles.TryGetValue(moduleId, out packed))
                throw new ArgumentException("SET_STATE holds no model of module '" + moduleId + "'");
            if (packed == null) throw new InvalidOperationException("SET_STATE holds no onnx_file");
            return DecodeOnnxFile(packed);
        }

        /// <summary>SET_STATE's <c>onnx_file</c> (base64 of the gzip-compressed ONNX) as the ONNX bytes.</summary>
        public static byte[] DecodeOnnxFile(string onnxFile)
        {
            byte[] gzipped = Convert.FromBase64String(onnxFile);
            using (var input = new GZipStream(new MemoryStream(gzipped), CompressionMode.Decompress))
            using (var output = new MemoryStream())
            {
                var buffer = new byte[16384];
                int n;
                while ((n = input.Read(buffer, 0, buffer.Length)) > 0) output.Write(buffer, 0, n);
                return output.ToArray();
            }
        }
    }
}
