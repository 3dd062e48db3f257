// Plays a policy bundled with a game, with no gateway: loads an ONNX file with
// MlpPolicyRuntime.FromFile (the input names and the observation shape from the model
// itself) and OnnxPolicy (the action space from its metadata), as a game shipping the
// gateway's GET /api/model.onnx would (tests/test_csharp_kit.py compares it with
// onnxruntime):
//
//   mono build/PlayOnnx.exe model.onnx < observations.jsonl
//
// Each stdin line: a JSON list (one observation, flattened) or {"obs": [...],
// "action_mask": [...]}. stdout: first what the runtime read from the model
// ({"input_name", "action_mask_input_name", "observation_shape", "action_space",
// "weights_seq_no"}), then per line {"outputs": [the model's output 0], "action": the
// most likely action}. A model it cannot play: "error: ..." on stderr, exit 3.

using System;
using System.Collections.Generic;
using System.IO;

namespace RLlink.Tools
{
    public static class PlayOnnx
    {
        public static int Main(string[] args)
        {
            if (args.Length != 1)
            {
                Console.Error.WriteLine("usage: mono PlayOnnx.exe model.onnx < observations.jsonl");
                return 2;
            }
            MlpPolicyRuntime runtime;
            OnnxPolicy policy;
            try
            {
                runtime = MlpPolicyRuntime.FromFile(args[0]);
                policy = OnnxPolicy.FromFile(args[0]);
            }
            catch (Exception e) when (e is NotSupportedException || e is InvalidDataException)
            {
                Console.Error.WriteLine("error: " + e.Message);
                return 3;
            }
            Console.WriteLine(Json.Serialize(new Dictionary<string, object>
            {
                { "input_name", runtime.InputName },
                { "action_mask_input_name", runtime.ActionMaskInputName },
                { "observation_shape", runtime.ObservationShape },
                { "action_space", policy.ActionSpace.ToString() },
                { "weights_seq_no", policy.WeightsSeqNo },
            }));
            string line;
            while ((line = Console.ReadLine()) != null)
            {
                if (line.Trim().Length == 0) continue;
                object parsed = Json.Parse(line);
                var item = parsed as Dictionary<string, object>;
                float[] obs = Json.ToFloats(item == null ? parsed : item["obs"]);
                float[] mask = item != null && item.ContainsKey("action_mask") ? Json.ToFloats(item["action_mask"]) : null;
                float[] outputs, stateOut;
                if (runtime.StateSize > 0) // a recurrent model: the state policy.Act is about to use (it carries it)
                    outputs = runtime.Run(obs, runtime.ActionMaskInputName == null ? null : mask ?? AllOnes(policy), policy.State, out stateOut);
                else outputs = runtime.ActionMaskInputName == null ? runtime.Run(obs) : runtime.Run(obs, mask ?? AllOnes(policy));
                Console.WriteLine(Json.Serialize(new Dictionary<string, object>
                {
                    { "outputs", outputs },
                    { "action", policy.Act(obs, mask).Raw },
                }));
            }
            return 0;
        }

        static float[] AllOnes(OnnxPolicy policy)
        {
            var ones = new float[policy.ActionSpace.NumLogits];
            for (int i = 0; i < ones.Length; i++) ones[i] = 1f;
            return ones;
        }
    }
}
