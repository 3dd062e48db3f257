// Runs an ONNX policy with the kit's MlpPolicyRuntime, for checking it against another
// runtime (tests/test_csharp_kit.py compares it with onnxruntime):
//
//   mono build/OnnxRun.exe model.onnx 4 < observations.jsonl
//
// The second argument is one observation's shape (e.g. 4, or 2x3). Each stdin line is a
// JSON list of an observation's values (flattened), or, for a model with an action mask
// (a second input), {"obs": [...], "action_mask": [...]}; each stdout line is the JSON
// list of the model's output 0 for it. The first stdout line is the model's metadata as
// JSON. A model MlpPolicyRuntime does not run: "error: ..." on stderr, exit 3.
//
// A recurrent model (input state_in): the tool carries the state itself, zeros at first and
// then each step's state_out (a line's "state_in" replaces it: e.g. zeros at a new episode),
// and each stdout line is {"outputs": [...], "state_out": [...]}.
//
// A line {"obs": [...], "noise_free": true} runs a gSDE actor's exploring model without its
// noise (MlpPolicyRuntime.PlayNoiseFree: its output action_dist_inputs_noise_free).

using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;

namespace RLlink.Tools
{
    public static class OnnxRun
    {
        public static int Main(string[] args)
        {
            if (args.Length != 2)
            {
                Console.Error.WriteLine("usage: mono OnnxRun.exe model.onnx SHAPE < observations.jsonl");
                return 2;
            }
            var runtime = new MlpPolicyRuntime();
            int[] shape = args[1].Split('x').Select(int.Parse).ToArray();
            byte[] model = File.ReadAllBytes(args[0]);
            try
            {
                runtime.Load(model, null, null, shape);
            }
            catch (NotSupportedException e)
            {
                Console.Error.WriteLine("error: " + e.Message);
                return 3;
            }
            string inputName = "obs", maskName = null, names;
            if (runtime.Metadata.TryGetValue("input_name", out names)) inputName = names;
            if (runtime.Metadata.TryGetValue("input_names", out names))
            {
                var inputs = Json.Parse(names) as List<object>;
                if (inputs != null)
                    foreach (object input in inputs.Skip(1))
                        if ((string)input != MlpPolicyRuntime.StateInput) { maskName = (string)input; break; }
            }
            runtime.Load(model, inputName, null, shape, maskName);
            Console.WriteLine(Json.Serialize(runtime.Metadata));
            float[] state = runtime.StateSize > 0 ? new float[runtime.StateSize] : null;
            string line;
            while ((line = Console.ReadLine()) != null)
            {
                if (line.Trim().Length == 0) continue;
                object parsed = Json.Parse(line);
                var item = parsed as Dictionary<string, object>;
                float[] obs = Json.ToFloats(item == null ? parsed : item["obs"]);
                float[] mask = item != null && item.ContainsKey("action_mask") ? Json.ToFloats(item["action_mask"]) : null;
                runtime.PlayNoiseFree = item != null && item.ContainsKey("noise_free") && (bool)item["noise_free"];
                if (state == null)
                {
                    Console.WriteLine(Json.Serialize(runtime.Run(obs, mask)));
                    continue;
                }
                if (item != null && item.ContainsKey("state_in")) state = Json.ToFloats(item["state_in"]);
                float[] output = runtime.Run(obs, mask, state, out state);
                Console.WriteLine(Json.Serialize(new Dictionary<string, object> { { "outputs", output }, { "state_out", state } }));
            }
            return 0;
        }
    }
}
