// Stand-ins for the few UnityEditor types the package's Editor assembly
// (clients/unity/Editor/) uses, so build.sh compiles it with mono. Same names and
// signatures as Unity's, no behaviour. Never copy this file into a Unity project.

#if RLLINK_STUBS
using System;

namespace UnityEditor
{
    public class Editor : UnityEngine.ScriptableObject
    {
        public UnityEngine.Object target;
        public virtual void OnInspectorGUI() { }
        public bool DrawDefaultInspector() { return false; }
    }

    [AttributeUsage(AttributeTargets.Class, AllowMultiple = true)]
    public sealed class CustomEditor : Attribute
    {
        public CustomEditor(Type inspectedType) { }
        public CustomEditor(Type inspectedType, bool editorForChildClasses) { }
    }

    public enum MessageType { None, Info, Warning, Error }

    public static class EditorGUILayout
    {
        public static void HelpBox(string message, MessageType type) { }
        public static void Space() { }
    }

    public enum BuildTarget { StandaloneOSX = 2, StandaloneWindows = 5, iOS = 9, Android = 13, StandaloneWindows64 = 19, WebGL = 20, StandaloneLinux64 = 24 }

    public static class EditorUserBuildSettings
    {
        public static BuildTarget activeBuildTarget = BuildTarget.StandaloneLinux64;
    }
}
#endif
