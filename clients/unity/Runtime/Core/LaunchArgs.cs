// The command-line arguments a gateway gives the game builds it launches (--env-path):
// where to connect and how fast to run. Unknown arguments are the game's own and are
// left alone. Names: RLlink's "Launching games" (shared by every kit and reference client).

using System;
using System.Globalization;

namespace RLlink
{
    public sealed class LaunchArgs
    {
        /// <summary>--rllink-host: the gateway's host (null: not given).</summary>
        public string Host;
        /// <summary>--rllink-port: the gateway's TCP port.</summary>
        public int? Port;
        /// <summary>--rllink-token: the gateway's auth token (only when its auth is on).</summary>
        public string Token;
        /// <summary>--rllink-time-scale: how much faster than real time to run the game.</summary>
        public float? TimeScale;
        /// <summary>--rllink-env-index: this process's index among the N launched (0..N-1).</summary>
        public int? EnvIndex;

        /// <summary>Whether the gateway launched this process (any --rllink-* argument given).</summary>
        public bool Launched { get { return Host != null || Port.HasValue || Token != null || TimeScale.HasValue || EnvIndex.HasValue; } }

        /// <summary>This process's arguments (Environment.GetCommandLineArgs()).</summary>
        public static LaunchArgs FromCommandLine() { return Parse(Environment.GetCommandLineArgs()); }

        /// <summary>The --rllink-* arguments among <paramref name="args"/> (each "--name value" or
        /// "--name=value"); a malformed value is an ArgumentException naming the argument.</summary>
        public static LaunchArgs Parse(string[] args)
        {
            var launch = new LaunchArgs();
            for (int i = 0; i < args.Length; i++)
            {
                string name = args[i], value = null;
                if (!name.StartsWith("--rllink-", StringComparison.Ordinal)) continue;
                int equals = name.IndexOf('=');
                if (equals >= 0)
                {
                    value = name.Substring(equals + 1);
                    name = name.Substring(0, equals);
                }
                else if (i + 1 < args.Length) value = args[++i];
                if (value == null) throw new ArgumentException(name + " needs a value");
                switch (name)
                {
                    case "--rllink-host": launch.Host = value; break;
                    case "--rllink-port": launch.Port = Int(name, value, 1, 65535); break;
                    case "--rllink-token": launch.Token = value; break;
                    case "--rllink-time-scale":
                        float scale;
                        if (!float.TryParse(value, NumberStyles.Float, CultureInfo.InvariantCulture, out scale) || !(scale > 0))
                            throw new ArgumentException(name + " must be a number above 0, got '" + value + "'");
                        launch.TimeScale = scale;
                        break;
                    case "--rllink-env-index": launch.EnvIndex = Int(name, value, 0, int.MaxValue); break;
                    default: break; // a newer gateway's argument: not ours to refuse
                }
            }
            return launch;
        }

        static int Int(string name, string value, int min, int max)
        {
            int n;
            if (!int.TryParse(value, NumberStyles.Integer, CultureInfo.InvariantCulture, out n) || n < min || n > max)
                throw new ArgumentException(name + " must be an integer in " + min + ".." + max + ", got '" + value + "'");
            return n;
        }
    }
}
