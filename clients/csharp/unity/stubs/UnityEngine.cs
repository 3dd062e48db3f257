// Stand-ins for the few UnityEngine types the adapter uses, so build.sh can compile
// unity/*.cs with mono's mcs and catch mistakes without Unity. Never copy this file
// into a Unity project (Unity has the real ones).

#if RLLINK_STUBS
using System;

namespace UnityEngine
{
    public class Object
    {
        public string name = "";
    }

    public class Component : Object { }

    public class Behaviour : Component
    {
        public bool enabled = true;
    }

    public class MonoBehaviour : Behaviour { }

    public static class Debug
    {
        public static void Log(object message) { Console.WriteLine(message); }
        public static void LogWarning(object message) { Console.Error.WriteLine(message); }
        public static void LogError(object message) { Console.Error.WriteLine(message); }
    }

    [AttributeUsage(AttributeTargets.Field, AllowMultiple = true)]
    public class HeaderAttribute : Attribute
    {
        public HeaderAttribute(string header) { }
    }

    [AttributeUsage(AttributeTargets.Field)]
    public class TooltipAttribute : Attribute
    {
        public TooltipAttribute(string tooltip) { }
    }
}
#endif
