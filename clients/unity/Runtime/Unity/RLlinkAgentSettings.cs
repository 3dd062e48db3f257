// Checks of an RLlinkAgent's inspector settings, before Play mode finds out: the
// package's inspector (Editor/RLlinkAgentEditor.cs) shows them under the fields, and a
// game may log them itself. Plain logic over the agent's fields, no editor API.

using System;
using System.Collections.Generic;

namespace RLlink.Unity
{
    public enum SettingsIssueLevel { Info, Warning, Error }

    /// <summary>One finding about an agent's settings.</summary>
    public sealed class SettingsIssue
    {
        public readonly SettingsIssueLevel Level;
        public readonly string Message;

        public SettingsIssue(SettingsIssueLevel level, string message)
        {
            Level = level;
            Message = message;
        }

        public override string ToString() { return Level + ": " + Message; }
    }

    public static class RLlinkAgentSettings
    {
        /// <summary>The host name a TCP connection uses: the host itself, or, for a WebGL
        /// player's URL (ws(s)://host:8000/rllink), its host part, so that the same agent
        /// plays in the editor (TCP, to its <c>port</c>) and in the WebGL build.</summary>
        public static string TcpHost(string host)
        {
            if (string.IsNullOrEmpty(host)) return host;
            Uri uri;
            if (IsWebSocketUrl(host) && Uri.TryCreate(host.Trim(), UriKind.Absolute, out uri)) return uri.Host;
            return host.Trim();
        }

        /// <summary>ws:// or wss://, what a WebGL player's host must be.</summary>
        public static bool IsWebSocketUrl(string host)
        {
            if (host == null) return false;
            string h = host.Trim();
            return h.StartsWith("ws://", StringComparison.OrdinalIgnoreCase) || h.StartsWith("wss://", StringComparison.OrdinalIgnoreCase);
        }

        /// <summary>What is wrong or worth knowing about the agent's settings, for a build for
        /// WebGL (<paramref name="webGL"/>) or for another player (and the editor's Play mode,
        /// which always speaks TCP). Empty: nothing to say.</summary>
        public static List<SettingsIssue> Check(RLlinkAgent agent, bool webGL)
        {
            var issues = new List<SettingsIssue>();
            Action<SettingsIssueLevel, string> add = (level, message) => issues.Add(new SettingsIssue(level, message));
            if (agent.decisionPeriod < 1)
                add(SettingsIssueLevel.Warning, "decisionPeriod " + agent.decisionPeriod + " is taken as 1 (an action every FixedUpdate)");
            if (agent.maxSteps < 0)
                add(SettingsIssueLevel.Warning, "maxSteps " + agent.maxSteps + " is taken as 0 (no limit)");

            OnnxPolicy bundled;
            try
            {
                bundled = agent.CreateBundledPolicy(); // bundledModel, or the agent's own override
            }
            catch (Exception e)
            {
                add(SettingsIssueLevel.Error, "the bundled model cannot be played: " + e.Message);
                return issues;
            }
            if (bundled != null)
            {
                add(SettingsIssueLevel.Info, "plays the bundled model with no gateway (policy version " + bundled.WeightsSeqNo
                    + ", action space " + bundled.ActionSpace + (bundled.ActionMasking ? ", with an action mask" : "")
                    + "); the gateway settings are unused");
                var resources = bundled.Runtime as IDisposable;
                if (resources != null) resources.Dispose();
                return issues;
            }

            CheckRecording(agent, webGL, add);
            if (agent.inference == InferenceMode.Heuristic && string.IsNullOrEmpty(agent.host == null ? null : agent.host.Trim()))
            {
                add(SettingsIssueLevel.Info, "plays Heuristic() with no gateway (host is empty): nothing is sent");
                return issues;
            }
            if (string.IsNullOrEmpty(agent.host == null ? null : agent.host.Trim()))
            {
                add(SettingsIssueLevel.Error, "host is empty: the gateway's address (127.0.0.1, or ws://HOST:8000/rllink for WebGL)");
                return issues;
            }
            if (agent.token != null && agent.token != agent.token.Trim())
                add(SettingsIssueLevel.Warning, "token has leading or trailing spaces: the gateway compares it as is");
            if (agent.port < 1 || agent.port > 65535)
                add(SettingsIssueLevel.Error, "port " + agent.port + " is not a TCP port: the gateway's tcp_port (5555 by default)");
            if (!string.IsNullOrEmpty(agent.agentId) && !string.IsNullOrEmpty(agent.moduleId))
                add(SettingsIssueLevel.Info, "moduleId '" + agent.moduleId + "' wins over the policy_mapping of agentId '" + agent.agentId + "'");

            if (webGL)
            {
                if (!IsWebSocketUrl(agent.host))
                    add(SettingsIssueLevel.Error, "a WebGL player cannot open sockets: set host to the gateway's WebSocket URL, "
                        + "ws://HOST:8000/rllink (its http_port; wss:// with TLS). Play mode in the editor still uses TCP to that host and port "
                        + agent.port);
                if (agent.inference == InferenceMode.Local)
                    add(SettingsIssueLevel.Warning, "a WebGL player plays in thin mode (through the bridge): inference Local applies in the editor and other players only");
                if (agent.inference == InferenceMode.Heuristic)
                    add(SettingsIssueLevel.Warning, "a WebGL player plays Heuristic() without sending its actions (the bridge speaks thin mode only)");
                if (agent.useTls && agent.host.Trim().StartsWith("ws://", StringComparison.OrdinalIgnoreCase))
                    add(SettingsIssueLevel.Warning, "useTls is for TCP; a WebGL player uses TLS when host starts with wss://");
            }
            else if (IsWebSocketUrl(agent.host))
            {
                add(SettingsIssueLevel.Info, "host is a WebSocket URL: this player (and Play mode) connects over TCP to "
                    + TcpHost(agent.host) + ":" + agent.port);
            }
            return issues;
        }

        /// <summary>recordDemosPath: used by a heuristic agent only, and not in a WebGL player.</summary>
        static void CheckRecording(RLlinkAgent agent, bool webGL, Action<SettingsIssueLevel, string> add)
        {
            string path = agent.recordDemosPath == null ? "" : agent.recordDemosPath.Trim();
            if (path.Length == 0) return;
            if (agent.inference != InferenceMode.Heuristic)
                add(SettingsIssueLevel.Warning, "recordDemosPath is for inference Heuristic (the game's own play): this agent records nothing");
            else if (webGL)
                add(SettingsIssueLevel.Warning, "a WebGL player has no file system to keep " + path + " in: record demonstrations in the editor or a desktop player");
            else
                add(SettingsIssueLevel.Info, "records each episode Heuristic() plays to " + path + " (demonstrations for the gateway's demos setting)");
        }
    }
}
