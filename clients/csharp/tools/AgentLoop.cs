// Runs the Unity package's code outside Unity: the CartPole sample's agent
// (Samples~/CartPole/CartPoleAgent.cs, an RLlinkAgent) stepped by hand the way Unity's
// player loop steps it (Awake, OnEnable, then FixedUpdate after FixedUpdate), the
// inspector's settings checks, and its "Test connection". Built by build.sh against the
// stand-ins of UnityEngine and UnityEditor (stubs/); tests/test_csharp_kit.py runs it
// against a real gateway. Unity itself is not involved: this exercises the package's
// C#, not Unity's player loop, physics or serialization.
//
//   mono AgentLoop.exe train --host 127.0.0.1 --port 5555 [--token T] [--inference thin|local|heuristic]
//                            [--target-return 200] [--max-seconds 180] [--time-scale 1]
//   mono AgentLoop.exe play --model policy.onnx [--episodes 20]     (bundledModel: no gateway)
//   mono AgentLoop.exe play --heuristic [--episodes 20]             (Heuristic(), no gateway)
//                            [--record-demos demos.jsonl] [--agent-id A] [--module M]
//                            (recordDemosPath: each episode into the demonstrations file)
//   mono AgentLoop.exe sensor --rays 3 --fov 90 --length 10 --wall 5  (a ray fan facing a wall
//                            at z = wall: one line of the sensor's observations)
// The --rllink-* launch arguments of a gateway-launched game may follow any command; the
// agent takes them over its own settings, as a player would.
//   mono AgentLoop.exe test-connection --host H --port P [--token T] [--agent-id A] [--module M]
//   mono AgentLoop.exe settings [--model policy.onnx] [--bad-model image.onnx]
//
// train: exits 0 with "reached the target: mean return M >= T after E episodes, S steps"
// once the last 20 episodes average the target, 1 when the time runs out, 3 when the
// agent stopped on a gateway error. play: "episode I: return R, steps S" per episode, then
// "played: mean return M over E episodes"; 3 when the agent stopped (e.g. an unwritable
// --record-demos file).
// test-connection: "ok: ..." (exit 0) or "failed: ..." (exit 1). settings: one JSON line
// per case: {"case": ..., "issues": ["Error: ...", ...]}.

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Reflection;
using RLlink.Samples.CartPole;
using RLlink.Unity;
using RLlink.Unity.EditorTools;
using UnityEngine;

namespace RLlink.Tools
{
    public static class AgentLoop
    {
        const int Window = 20;

        public static int Main(string[] args)
        {
            if (args.Length == 0) return Usage();
            var options = new Dictionary<string, string>();
            for (int i = 1; i < args.Length; i++)
            {
                if (args[i] == "--heuristic") options["heuristic"] = "true";
                else if (i + 1 < args.Length) options[args[i].TrimStart('-')] = args[++i];
            }
            Func<string, string, string> get = (key, fallback) => options.ContainsKey(key) ? options[key] : fallback;
            try
            {
                switch (args[0])
                {
                    case "train": return Train(NewAgent(get), double.Parse(get("target-return", "200"), CultureInfo.InvariantCulture),
                        double.Parse(get("max-seconds", "180"), CultureInfo.InvariantCulture));
                    case "play": return Play(get("model", null), int.Parse(get("episodes", "20")), get("record-demos", ""),
                        get("agent-id", ""), get("module", ""));
                    case "sensor": return Sensor(int.Parse(get("rays", "3")), Float(get("fov", "90")), Float(get("length", "10")),
                        Float(get("wall", "5")));
                    case "test-connection": return TestConnection(NewAgent(get));
                    case "settings": return Settings(get("model", null), get("bad-model", null));
                    default: return Usage();
                }
            }
            catch (TargetInvocationException e)
            {
                Console.Error.WriteLine("error: " + e.InnerException);
                return 4;
            }
        }

        static int Usage()
        {
            Console.Error.WriteLine("usage: mono AgentLoop.exe train|play|test-connection|settings [--option value ...] (see AgentLoop.cs)");
            return 2;
        }

        static CartPoleAgent NewAgent(Func<string, string, string> get)
        {
            return new CartPoleAgent
            {
                host = get("host", "127.0.0.1"),
                port = int.Parse(get("port", "5555")),
                token = get("token", ""),
                agentId = get("agent-id", ""),
                moduleId = get("module", ""),
                inference = Mode(get("inference", "thin")),
                seed = int.Parse(get("seed", "0")),
                timeScale = Float(get("time-scale", "1")),
                logEvery = 0,
            };
        }

        static InferenceMode Mode(string name)
        {
            return name == "local" ? InferenceMode.Local : name == "heuristic" ? InferenceMode.Heuristic : InferenceMode.Thin;
        }

        static float Float(string text) { return float.Parse(text, CultureInfo.InvariantCulture); }

        /// <summary>A Unity message (Awake, OnEnable, FixedUpdate, ...), if the component has it,
        /// as the player loop sends it: by name, whatever its access.</summary>
        static void Send(object component, string message)
        {
            var method = component.GetType().GetMethod(message, BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic,
                null, Type.EmptyTypes, null);
            if (method != null) method.Invoke(component, null);
        }

        static int Train(CartPoleAgent agent, double target, double maxSeconds)
        {
            var clock = Stopwatch.StartNew();
            var returns = new List<float>();
            long steps = 0;
            Send(agent, "Awake");
            Send(agent, "OnEnable");
            Console.WriteLine("inference: " + agent.inference.ToString().ToLowerInvariant() + ", connecting to " + agent.host + ":" + agent.port
                + ", time scale " + Time.timeScale.ToString(CultureInfo.InvariantCulture) + ", seed " + agent.seed);
            try
            {
                while (true)
                {
                    if (!agent.enabled)
                    {
                        Console.Error.WriteLine("error: the agent stopped (see the error above)");
                        return 3;
                    }
                    int before = agent.StepCount;
                    Send(agent, "FixedUpdate");
                    if (agent.StepCount > before) steps++;
                    if (agent.CompletedEpisodes > returns.Count)
                    {
                        returns.Add(agent.LastReturn);
                        if (returns.Count % Window == 0)
                            Console.WriteLine("episode " + returns.Count + ": mean return " + Mean(returns).ToString("0.0", CultureInfo.InvariantCulture));
                        if (returns.Count >= Window && Mean(returns) >= target)
                        {
                            Console.WriteLine("reached the target: mean return " + Mean(returns).ToString("0.0", CultureInfo.InvariantCulture)
                                + " >= " + target + " after " + returns.Count + " episodes, " + steps + " steps");
                            return 0;
                        }
                    }
                    if (clock.Elapsed.TotalSeconds > maxSeconds)
                    {
                        Console.WriteLine("budget spent before the target: " + returns.Count + " episodes, " + steps + " steps");
                        return 1;
                    }
                }
            }
            finally
            {
                Send(agent, "OnDisable");
            }
        }

        static double Mean(List<float> returns)
        {
            return returns.Skip(Math.Max(0, returns.Count - Window)).Average(r => (double)r);
        }

        static int Play(string model, int episodes, string recordDemos, string agentId, string module)
        {
            var agent = model != null
                ? new CartPoleAgent { host = "", logEvery = 0, bundledModel = new TextAsset(File.ReadAllBytes(model)) }
                : new CartPoleAgent { host = "", logEvery = 0, inference = InferenceMode.Heuristic, recordDemosPath = recordDemos };
            agent.agentId = agentId;
            agent.moduleId = module;
            Send(agent, "Awake");
            Send(agent, "OnEnable");
            if (!agent.enabled) return 3;
            var returns = new List<float>();
            int steps = 0;
            while (returns.Count < episodes)
            {
                int before = agent.StepCount;
                Send(agent, "FixedUpdate");
                if (agent.StepCount > before) steps = agent.StepCount;
                if (agent.CompletedEpisodes > returns.Count)
                {
                    returns.Add(agent.LastReturn);
                    Console.WriteLine("episode " + returns.Count + ": return " + agent.LastReturn.ToString("R", CultureInfo.InvariantCulture)
                        + ", steps " + steps);
                }
            }
            Send(agent, "OnDisable");
            Console.WriteLine("played: mean return " + returns.Average(r => (double)r).ToString("0.0", CultureInfo.InvariantCulture)
                + " over " + returns.Count + " episodes");
            return 0;
        }

        static int Sensor(int rays, float fov, float length, float wall)
        {
            Physics.StubPlanes.Add(new KeyValuePair<Vector3, float>(new Vector3(0, 0, 1), wall));
            var sensor = new RLlinkRaySensor { rayCount = rays, fieldOfView = fov, rayLength = length };
            var obs = new List<float>();
            sensor.AddObservations(obs);
            Console.WriteLine(string.Join(" ", obs.Select(v => v.ToString("0.0000", CultureInfo.InvariantCulture)).ToArray()));
            return 0;
        }

        static int TestConnection(CartPoleAgent agent)
        {
            bool ok;
            string report = RLlinkAgentEditor.TestConnection(agent, 3000, out ok);
            Console.WriteLine((ok ? "ok: " : "failed: ") + report);
            return ok ? 0 : 1;
        }

        static int Settings(string model, string badModel)
        {
            var cases = new List<KeyValuePair<string, Func<List<SettingsIssue>>>>();
            Action<string, bool, Action<CartPoleAgent>> add = (name, webGL, set) => cases.Add(new KeyValuePair<string, Func<List<SettingsIssue>>>(name, () =>
            {
                var agent = new CartPoleAgent();
                set(agent);
                return RLlinkAgentSettings.Check(agent, webGL);
            }));
            add("defaults", false, a => { });
            add("empty-host", false, a => a.host = " ");
            add("bad-port", false, a => a.port = 70000);
            add("decision-period-0", false, a => a.decisionPeriod = 0);
            add("webgl-tcp-host", true, a => { });
            add("webgl-url", true, a => a.host = "ws://127.0.0.1:8000/rllink");
            add("webgl-local", true, a => { a.host = "wss://gateway.example:8000/rllink"; a.inference = InferenceMode.Local; });
            add("url-in-editor", false, a => a.host = "ws://10.0.0.7:8000/rllink");
            add("heuristic-alone", false, a => { a.host = ""; a.inference = InferenceMode.Heuristic; });
            add("webgl-heuristic", true, a => { a.host = "ws://127.0.0.1:8000/rllink"; a.inference = InferenceMode.Heuristic; });
            add("recording", false, a => { a.inference = InferenceMode.Heuristic; a.recordDemosPath = "demos.jsonl"; });
            add("recording-thin", false, a => a.recordDemosPath = "demos.jsonl");
            add("webgl-recording", true, a => { a.host = "ws://127.0.0.1:8000/rllink"; a.inference = InferenceMode.Heuristic; a.recordDemosPath = "d.jsonl"; });
            if (model != null) add("bundled", false, a => a.bundledModel = new TextAsset(File.ReadAllBytes(model)));
            if (badModel != null) add("bundled-unplayable", false, a => a.bundledModel = new TextAsset(File.ReadAllBytes(badModel)));
            foreach (var entry in cases)
                Console.WriteLine(Json.Serialize(new Dictionary<string, object>
                {
                    { "case", entry.Key },
                    { "issues", entry.Value().Select(issue => issue.ToString()).ToList() },
                }));
            Console.WriteLine(Json.Serialize(new Dictionary<string, object>
            {
                { "case", "tcp-host" },
                { "issues", new List<object> { RLlinkAgentSettings.TcpHost("ws://10.0.0.7:8000/rllink"), RLlinkAgentSettings.TcpHost(" 127.0.0.1 ") } },
            }));
            return 0;
        }
    }
}
