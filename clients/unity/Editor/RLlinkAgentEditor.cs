// The inspector of every RLlinkAgent (your subclasses included): the usual fields, then
// what RLlinkAgentSettings.Check finds for the active build target (an empty host, a TCP
// host in a WebGL build, a bundled model MlpPolicyRuntime cannot run, ...), and a "Test
// connection" button that does what Play mode does first, over TCP: PING with the token,
// GET_CONFIG, and shows the gateway's spaces for the agent's module, or its error.
//
// Editor only (RLlink.Editor.asmdef). CI compiles it with mono against stand-ins of the
// UnityEditor types it uses (clients/csharp/stubs/, outside the package) and runs
// TestConnection against a real gateway; the inspector itself has not been drawn by CI.

using RLlink.Unity;
using UnityEditor;
using UnityEngine;

namespace RLlink.Unity.EditorTools
{
    [CustomEditor(typeof(RLlinkAgent), true)]
    public class RLlinkAgentEditor : UnityEditor.Editor
    {
        const int TestTimeoutMs = 3000;

        System.Collections.Generic.List<SettingsIssue> issues;
        bool issuesForWebGL;
        string connectionReport;
        MessageType connectionReportType;

        public override void OnInspectorGUI()
        {
            bool changed = DrawDefaultInspector();
            var agent = (RLlinkAgent)target;
            bool webGL = EditorUserBuildSettings.activeBuildTarget == BuildTarget.WebGL;
            if (issues == null || changed || webGL != issuesForWebGL)
            {
                issues = RLlinkAgentSettings.Check(agent, webGL); // parses a bundled model: not on every repaint
                issuesForWebGL = webGL;
                if (changed) connectionReport = null;
            }
            foreach (var issue in issues) EditorGUILayout.HelpBox(issue.Message, Type(issue.Level));
            if (agent.bundledModel != null) return;

            EditorGUILayout.Space();
            if (GUILayout.Button(new GUIContent("Test connection", "PING with the token and GET_CONFIG over TCP, as Play mode connects (up to "
                + TestTimeoutMs / 1000 + " s)")))
            {
                bool ok;
                connectionReport = TestConnection(agent, TestTimeoutMs, out ok);
                connectionReportType = ok ? MessageType.Info : MessageType.Error;
            }
            if (connectionReport != null) EditorGUILayout.HelpBox(connectionReport, connectionReportType);
        }

        static MessageType Type(SettingsIssueLevel level)
        {
            switch (level)
            {
                case SettingsIssueLevel.Error: return MessageType.Error;
                case SettingsIssueLevel.Warning: return MessageType.Warning;
                default: return MessageType.Info;
            }
        }

        /// <summary>
        /// Connect as the agent will in Play mode (TCP to its host, or a WebGL URL's host, and
        /// port; its token and TLS), read SET_CONFIG and close. Returns what the gateway offers
        /// the agent's module (<paramref name="ok"/> true), or why it failed (false). Blocks
        /// up to about <paramref name="timeoutMs"/>.
        /// </summary>
        public static string TestConnection(RLlinkAgent agent, int timeoutMs, out bool ok)
        {
            ok = false;
            var options = RLlinkConnections.ClientOptions(agent); // as Play mode connects, declared spaces included
            options.Log = null;
            options.ConnectTimeoutMs = timeoutMs;
            options.ReceiveTimeoutMs = timeoutMs;
            options.AutoReconnect = false;
            options.ReconnectTimeoutMs = 0; // one attempt
            string where = options.Host + ":" + options.Port;
            try
            {
                using (var client = new RLlinkClient(options))
                {
                    GatewayConfig config = client.Connect();
                    ModuleInfo module = config.ModuleFor(string.IsNullOrEmpty(agent.agentId) ? null : agent.agentId,
                        string.IsNullOrEmpty(agent.moduleId) ? null : agent.moduleId);
                    ok = true;
                    return "Connected to " + where + (config.ProtocolVersion != null ? " (RLlink " + config.ProtocolVersion + ")" : "")
                        + ". Module '" + module.ModuleId + "': observations " + module.ObservationSpace + ", actions " + module.ActionSpace
                        + (module.ActionMasking ? ", with action masks (override GetActionMask)" : "")
                        + (module.Trainable ? "" : "; not trained (frozen)")
                        + (agent.inference == InferenceMode.Local ? ". Local inference sends experience every " + config.EnvStepsPerSample + " steps." : ".");
                }
            }
            catch (RLlinkException e)
            {
                string hint = e.Code == "unauthorized" ? " Check the token against the gateway's auth_token."
                    : e.Code == RLlinkException.ConnectionClosed ? " Is the gateway running, and is " + options.Port + " its tcp_port (5555 by default)?"
                    + (options.UseTls ? " With useTls the gateway needs tls_certfile." : "")
                    : "";
                return "Cannot use the gateway at " + where + ": " + e.Message + "." + hint;
            }
            catch (System.ArgumentException e) // ModuleFor: no such module
            {
                return "Connected to " + where + ", but: " + e.Message;
            }
        }
    }
}
