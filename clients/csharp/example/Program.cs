// CartPole in C#, trained through an RLlink gateway.
//
//   mono CartPole.exe --host 127.0.0.1 --port 5555 --target-return 200 --max-seconds 300
//
// Thin mode by default (the gateway acts; one round trip per step); --inference local
// runs the policy of each SET_STATE in C# (MlpPolicyRuntime) and sends the experience
// with EPISODES_AND_GET_STATE; --inference heuristic plays the env's scripted controller
// (IExampleEnv.Heuristic) and logs each action (LOG_ACTION), which the gateway trains on.
// --envs N (thin) steps N carts with one batched GET_ACTION.
// --env picks another task (ChoiceEnvs.cs; the gateway must have its spaces):
// two-targets (MultiDiscrete), masked-targets and masked-pick (action masks: the
// gateway's action_masking on; each step's mask goes to Act or GET_ACTION).
// Prints progress every 20 episodes; exits 0 once the mean return of the last 20
// episodes reaches the target, 1 if the time or step budget ran out first, 2 for bad
// arguments (or a gateway whose spaces do not fit the env), 3 when the gateway refused
// us (the RLlinkException's code and message), 4 when the env was given an action it
// does not take (one its mask forbids). Started by a gateway (rllink-gateway --env-path
// "mono CartPole.exe"), it takes the --rllink-host, --rllink-port, --rllink-token and
// --rllink-env-index arguments it is given over its own (--rllink-time-scale: it runs
// as fast as it can anyway).
//
// --show-env-params NAME[,NAME...] (one env): at each episode's start, before its reset,
// prints one JSON line {"episode", "weights_seq_no", "env_params": {NAME: value}}, each value
// as GatewayConfig.GetEnvParam(NAME, null) reads it (a string; a number or bool as JSON
// writes it; null when the gateway sets none): the values a game would start it with.
//
// --show-episodes: after each episode, one JSON line {"episode", "return", "steps",
// "evaluation"}: whether it was an evaluation episode (AgentSession.IsEvaluationEpisode; with
// --envs, EPISODE_STARTED's): every Nth of the gateway's evaluation_interval, played with the
// distribution's mode and never trained on (local mode: the kit plays it so; thin: the gateway).
//
// --record-demos FILE [--episodes 20]: no gateway; the env's scripted controller plays
// (IExampleEnv.Heuristic: the best allowed action; CartPole: push under the falling pole)
// and each episode is appended to FILE as demonstrations (DemoRecorder: RLlink episode
// chunks, one a line, masks included), the file a gateway's `demos` setting pre-trains on.
// Prints one JSON line per episode ({"episode", "return", "steps"}); exit 2 when FILE
// cannot be written.

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.Linq;
using System.Security.Cryptography.X509Certificates;

namespace RLlink.Example
{
    public static class Program
    {
        const int Window = 20;

        sealed class Args
        {
            public string Host = "127.0.0.1";
            public int Port = 5555;
            public string Token;
            public double TargetReturn = 450;
            public double MaxSeconds = 300;
            public double ReconnectTimeoutSeconds = 30;
            public long MaxEnvSteps;
            public string Inference = "thin";
            public int Envs = 1;
            public string Env = "cartpole";
            public int Seed;
            public bool Tls;
            public string TlsCert;
            public string RecordDemos;
            public int Episodes = 20;
            public string[] ShowEnvParams;
            public bool ShowEpisodes;
        }

        const string Usage =
            "usage: mono CartPole.exe [--host 127.0.0.1] [--port 5555] [--token T] [--target-return 450]\n" +
            "                         [--max-seconds 300] [--max-env-steps 0] [--inference thin|local|heuristic]\n" +
            "                         [--reconnect-timeout-s 30]\n" +
            "                         [--envs 1] [--seed 0] [--tls [--tls-cert cert.pem]]\n" +
            "                         [--env cartpole|two-targets|masked-targets|masked-pick]\n" +
            "                         [--show-env-params NAME[,NAME...]] [--show-episodes]\n" +
            "       mono CartPole.exe --record-demos demos.jsonl [--episodes 20] [--env ...] [--seed 0]   (no gateway)";

        static readonly string[] EnvNames = { "cartpole", "two-targets", "masked-targets", "masked-pick" };

        static IExampleEnv NewEnv(string name, int seed)
        {
            switch (name)
            {
                case "two-targets": return new TwoTargetsEnv(seed, false);
                case "masked-targets": return new TwoTargetsEnv(seed, true);
                case "masked-pick": return new MaskedPickEnv(seed);
                default: return new CartPoleEnv(seed);
            }
        }

        /// <summary>Why the gateway's default module does not fit the env, or null.</summary>
        static string Misfit(GatewayConfig config, IExampleEnv env)
        {
            ModuleInfo module = config.Default;
            if (!config.Raw.ContainsKey("action_space")) return null; // RLlib's own server: no spaces to check
            if (module.ObservationSpace.ToString() != env.ObservationSpace || module.ActionSpace.ToString() != env.ActionSpace)
                return "the env needs observations " + env.ObservationSpace + " and actions " + env.ActionSpace
                    + "; the gateway has " + module.ObservationSpace + " and " + module.ActionSpace;
            env.Reset();
            if (env.ActionMask != null && !module.ActionMasking) return "the env has action masks: start the gateway with action_masking";
            return null;
        }

        public static int Main(string[] argv)
        {
            Args args;
            try
            {
                args = Parse(argv);
            }
            catch (ArgumentException e)
            {
                Console.Error.WriteLine("error: " + e.Message + "\n" + Usage);
                return 2;
            }
            if (args == null) { Console.WriteLine(Usage); return 0; }
            if (args.RecordDemos != null) return RecordDemos(args);

            var options = new RLlinkClientOptions
            {
                Host = args.Host,
                Port = args.Port,
                Token = args.Token,
                UseTls = args.Tls,
                ReconnectTimeoutMs = (int)(args.ReconnectTimeoutSeconds * 1000),
                Log = line => Console.WriteLine("rllink: " + line),
            };
            if (args.TlsCert != null)
            {
                var pinned = new X509Certificate2(args.TlsCert);
                options.CertificateValidation = (sender, certificate, chain, errors) =>
                    certificate != null && certificate.GetCertHashString() == pinned.GetCertHashString();
            }
            try
            {
                using (var client = new RLlinkClient(options))
                {
                    var config = client.Connect();
                    Console.WriteLine(string.Format(CultureInfo.InvariantCulture,
                        "gateway: observations {0}, actions {1}{5}, env_steps_per_sample {2}, protocol {3}; inference: {4}",
                        config.Default.ObservationSpace, config.Default.ActionSpace, config.EnvStepsPerSample,
                        config.ProtocolVersion ?? "?", args.Inference, config.Default.ActionMasking ? " (masked)" : ""));
                    string misfit = Misfit(config, NewEnv(args.Env, 0));
                    if (misfit != null)
                    {
                        Console.Error.WriteLine("error: " + misfit);
                        return 2;
                    }
                    bool reached = args.Envs > 1 ? TrainBatched(client, args) : Train(client, args);
                    return reached ? 0 : 1;
                }
            }
            catch (RLlinkException e)
            {
                Console.Error.WriteLine("error: the gateway refused us: [" + e.Code + "] " + e.GatewayMessage
                    + (e.Request != null ? " (request " + e.Request + ")" : ""));
                return 3;
            }
            catch (InvalidActionException e)
            {
                Console.Error.WriteLine("error: the env was given an action it does not take: " + e.Message);
                return 4;
            }
        }

        /// <summary>One env through AgentSession, as the Unity adapter drives it.</summary>
        static bool Train(RLlinkClient client, Args args)
        {
            var mode = args.Inference == "local" ? InferenceMode.Local
                : args.Inference == "heuristic" ? InferenceMode.Heuristic : InferenceMode.Thin;
            var session = new AgentSession(client, mode, mode == InferenceMode.Local ? new MlpPolicyRuntime() : null, args.Seed);
            var env = NewEnv(args.Env, args.Seed);
            var progress = new Progress(args);
            while (true)
            {
                if (args.ShowEnvParams != null) ShowEnvParams(client.Config, args.ShowEnvParams, session);
                float[] obs = env.Reset();
                float episodeReturn = 0;
                while (true)
                {
                    AgentAction action;
                    if (mode == InferenceMode.Heuristic)
                    {
                        object chosen = env.Heuristic();
                        session.Record(obs, chosen, env.ActionMask);
                        action = new AgentAction(chosen, 0);
                    }
                    else
                    {
                        action = session.Act(obs, env.ActionMask);
                    }
                    bool terminated, truncated;
                    float reward = env.Step(action, out terminated, out truncated);
                    obs = env.Observation();
                    session.AddReward(reward);
                    episodeReturn += reward;
                    if (terminated || truncated)
                    {
                        session.EndEpisode(obs, terminated, truncated);
                        if (args.ShowEpisodes) ShowEpisode(session.Episodes, episodeReturn, env.Steps, session.IsEvaluationEpisode);
                        break;
                    }
                }
                bool reached = progress.Episode(episodeReturn, env.Steps, session.WeightsSeqNo, session.Reconnects);
                if (reached || progress.BudgetSpent())
                {
                    if (mode == InferenceMode.Local) Console.WriteLine("models loaded " + session.ModelsLoaded + ", the last version " + session.WeightsSeqNo);
                    return reached;
                }
            }
        }

        /// <summary>--show-env-params: the named environment parameters as the next episode starts
        /// with them (GetEnvParam), one JSON line.</summary>
        static void ShowEnvParams(GatewayConfig config, string[] names, AgentSession session)
        {
            var values = new Dictionary<string, object>();
            foreach (string name in names) values[name] = config.GetEnvParam(name, (string)null);
            Console.WriteLine(Json.Serialize(new Dictionary<string, object>
            {
                { "episode", session.Episodes + 1 }, { "weights_seq_no", session.WeightsSeqNo }, { "env_params", values },
            }));
        }

        /// <summary>--show-episodes: an episode that ended, one JSON line.</summary>
        static void ShowEpisode(int episode, float episodeReturn, int steps, bool evaluation)
        {
            Console.WriteLine(Json.Serialize(new Dictionary<string, object>
            {
                { "episode", episode }, { "return", episodeReturn }, { "steps", steps }, { "evaluation", evaluation },
            }));
        }

        /// <summary>--record-demos: the env's scripted controller plays args.Episodes episodes, each
        /// written to the demonstrations file; no gateway.</summary>
        static int RecordDemos(Args args)
        {
            DemoRecorder recorder;
            try
            {
                recorder = new DemoRecorder(args.RecordDemos);
            }
            catch (Exception e)
            {
                if (!(e is System.IO.IOException || e is UnauthorizedAccessException || e is ArgumentException || e is NotSupportedException)) throw;
                Console.Error.WriteLine("error: " + e.Message);
                return 2;
            }
            using (recorder)
            {
                var env = NewEnv(args.Env, args.Seed);
                for (int episode = 1; episode <= args.Episodes; episode++)
                {
                    float[] obs = env.Reset();
                    float episodeReturn = 0;
                    while (true)
                    {
                        object action = env.Heuristic();
                        recorder.Step(obs, action, env.ActionMask);
                        bool terminated, truncated;
                        float reward = env.Step(new AgentAction(action, 0), out terminated, out truncated);
                        recorder.AddReward(reward);
                        episodeReturn += reward;
                        obs = env.Observation();
                        if (!terminated && !truncated) continue;
                        recorder.EndEpisode(obs, terminated, truncated);
                        break;
                    }
                    Console.WriteLine(Json.Serialize(new Dictionary<string, object>
                    {
                        { "episode", episode }, { "return", episodeReturn }, { "steps", env.Steps },
                    }));
                }
                Console.WriteLine("recorded: " + recorder.Episodes + " episodes, " + recorder.Steps + " steps to " + recorder.Path);
            }
            return 0;
        }

        /// <summary>N envs at once, thin: one batched GET_ACTION per step for all of them.</summary>
        static bool TrainBatched(RLlinkClient client, Args args)
        {
            if (args.Inference != "thin") throw new ArgumentException("--envs needs --inference thin");
            var envs = Enumerable.Range(0, args.Envs).Select(i => NewEnv(args.Env, args.Seed + i)).ToArray();
            var obs = envs.Select(e => e.Reset()).ToArray();
            var evaluating = new bool[envs.Length]; // the gateway plays that episode as an evaluation one
            var ids = new string[envs.Length];
            for (int i = 0; i < envs.Length; i++) ids[i] = client.StartEpisode(null, null, null, true, out evaluating[i]);
            var returns = new float[envs.Length];
            var progress = new Progress(args);
            int version = 0, ended = 0;
            while (true)
            {
                var batch = new List<ActionRequest>();
                for (int i = 0; i < envs.Length; i++) batch.Add(new ActionRequest(ids[i], obs[i], envs[i].ActionMask));
                AgentAction[] actions = client.GetActions(batch);
                version = actions[0].WeightsSeqNo;
                for (int i = 0; i < envs.Length; i++)
                {
                    bool terminated, truncated;
                    float reward = envs[i].Step(actions[i], out terminated, out truncated);
                    obs[i] = envs[i].Observation();
                    returns[i] += reward;
                    client.LogReturns(ids[i], reward);
                    if (!terminated && !truncated) continue;
                    client.EndEpisode(ids[i], obs[i], terminated, truncated);
                    if (args.ShowEpisodes) ShowEpisode(++ended, returns[i], envs[i].Steps, evaluating[i]);
                    if (progress.Episode(returns[i], envs[i].Steps, version, 0)) { client.Flush(); return true; }
                    obs[i] = envs[i].Reset();
                    returns[i] = 0;
                    ids[i] = client.StartEpisode(null, null, null, true, out evaluating[i]);
                }
                if (progress.BudgetSpent()) return false;
            }
        }

        sealed class Progress
        {
            readonly Args args;
            readonly Stopwatch clock = Stopwatch.StartNew();
            readonly Queue<float> recent = new Queue<float>();
            int episodes;
            long envSteps;

            public Progress(Args args) { this.args = args; }

            double Mean { get { return recent.Count > 0 ? recent.Average() : double.NaN; } }

            /// <summary>Record an episode; true once the last 20 average the target.</summary>
            public bool Episode(float episodeReturn, int steps, int version, int reconnects)
            {
                episodes++;
                envSteps += steps;
                recent.Enqueue(episodeReturn);
                if (recent.Count > Window) recent.Dequeue();
                bool reached = recent.Count == Window && Mean >= args.TargetReturn;
                if (episodes % Window == 0 || reached)
                    Console.WriteLine(string.Format(CultureInfo.InvariantCulture,
                        "v{0}  env steps {1}  episodes {2}  mean return (last {3}) {4:F1}  {5:F1}s{6}",
                        version, envSteps, episodes, recent.Count, Mean, clock.Elapsed.TotalSeconds,
                        reconnects > 0 ? "  reconnects " + reconnects : ""));
                if (reached)
                    Console.WriteLine(string.Format(CultureInfo.InvariantCulture,
                        "reached the target: mean return {0:F1} >= {1} after {2} episodes, {3} env steps, {4:F1}s",
                        Mean, args.TargetReturn, episodes, envSteps, clock.Elapsed.TotalSeconds));
                return reached;
            }

            public bool BudgetSpent()
            {
                bool spent = (args.MaxSeconds > 0 && clock.Elapsed.TotalSeconds >= args.MaxSeconds)
                    || (args.MaxEnvSteps > 0 && envSteps >= args.MaxEnvSteps);
                if (spent)
                    Console.WriteLine(string.Format(CultureInfo.InvariantCulture,
                        "budget spent before the target: mean return (last {0}) {1:F1} < {2} after {3} episodes, {4} env steps, {5:F1}s",
                        recent.Count, Mean, args.TargetReturn, episodes, envSteps, clock.Elapsed.TotalSeconds));
                return spent;
            }
        }

        static Args Parse(string[] argv)
        {
            var args = new Args();
            for (int i = 0; i < argv.Length; i++)
            {
                string flag = argv[i];
                if (flag == "-h" || flag == "--help") return null;
                if (flag == "--tls") { args.Tls = true; continue; }
                if (flag == "--show-episodes") { args.ShowEpisodes = true; continue; }
                if (i + 1 >= argv.Length) throw new ArgumentException(flag + " needs a value");
                string value = argv[++i];
                try
                {
                    switch (flag)
                    {
                        case "--host": args.Host = value; break;
                        case "--port": args.Port = int.Parse(value, CultureInfo.InvariantCulture); break;
                        case "--token": args.Token = value; break;
                        case "--target-return": args.TargetReturn = double.Parse(value, CultureInfo.InvariantCulture); break;
                        case "--max-seconds": args.MaxSeconds = double.Parse(value, CultureInfo.InvariantCulture); break;
                        case "--reconnect-timeout-s": args.ReconnectTimeoutSeconds = double.Parse(value, CultureInfo.InvariantCulture); break;
                        case "--max-env-steps": args.MaxEnvSteps = long.Parse(value, CultureInfo.InvariantCulture); break;
                        case "--envs": args.Envs = int.Parse(value, CultureInfo.InvariantCulture); break;
                        case "--seed": args.Seed = int.Parse(value, CultureInfo.InvariantCulture); break;
                        case "--record-demos": args.RecordDemos = value; break;
                        case "--episodes": args.Episodes = int.Parse(value, CultureInfo.InvariantCulture); break;
                        case "--show-env-params":
                            args.ShowEnvParams = value.Split(new[] { ',' }, StringSplitOptions.RemoveEmptyEntries);
                            if (args.ShowEnvParams.Length == 0) throw new ArgumentException("--show-env-params takes parameter names, NAME[,NAME...]");
                            break;
                        case "--env":
                            if (Array.IndexOf(EnvNames, value) < 0) throw new ArgumentException("--env is one of " + string.Join(", ", EnvNames));
                            args.Env = value;
                            break;
                        case "--tls-cert": args.TlsCert = value; args.Tls = true; break;
                        case "--inference":
                            if (value != "thin" && value != "local" && value != "heuristic")
                                throw new ArgumentException("--inference is thin, local or heuristic");
                            args.Inference = value;
                            break;
                        default:
                            if (flag.StartsWith("--rllink-", StringComparison.Ordinal)) break; // a gateway's launch argument: below
                            throw new ArgumentException("unknown option " + flag);
                    }
                }
                catch (FormatException)
                {
                    throw new ArgumentException(flag + " takes a number, not '" + value + "'");
                }
            }
            // Launched by a gateway (--env-path): its --rllink-* arguments win over our own.
            var launch = LaunchArgs.Parse(argv);
            if (launch.Host != null) args.Host = launch.Host;
            if (launch.Port.HasValue) args.Port = launch.Port.Value;
            if (launch.Token != null) args.Token = launch.Token;
            if (launch.EnvIndex.HasValue) args.Seed += 1000 * launch.EnvIndex.Value;
            if (args.Envs < 1) throw new ArgumentException("--envs must be at least 1");
            if (args.Episodes < 1) throw new ArgumentException("--episodes must be at least 1");
            if (args.Envs > 1 && args.Inference != "thin") throw new ArgumentException("--envs needs --inference thin");
            if (args.Envs > 1 && args.ShowEnvParams != null) throw new ArgumentException("--show-env-params shows one env's: leave out --envs");
            return args;
        }
    }
}
