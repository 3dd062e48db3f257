// Runs an ONNX policy with the kit's MlpPolicyRuntime, for checking it against another
// runtime (tests/test_csharp_kit.py compares it with onnxruntime):
//
//   mono build/OnnxRun.exe model.onnx 4 < observations.jsonl
//
// The second argument is one observation's shape (e.g. 4, or 2x3). Each stdin line is a
// JSON list of an observation's values (flattened); each stdout line is the JSON list of
// the model's output 0 for it. The first stdout line is the model's metadata as JSON.

using System;
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
            string inputName = "obs";
            runtime.Load(File.ReadAllBytes(args[0]), null, null, shape);
            string name;
            if (runtime.Metadata.TryGetValue("input_name", out name)) inputName = name;
            runtime.Load(File.ReadAllBytes(args[0]), inputName, null, shape);
            Console.WriteLine(Json.Serialize(runtime.Metadata));
            string line;
            while ((line = Console.ReadLine()) != null)
            {
                if (line.Trim().Length == 0) continue;
                Console.WriteLine(Json.Serialize(runtime.Run(Json.ToFloats(Json.Parse(line)))));
            }
            return 0;
        }
    }
}
