// Stand-ins for the few UnityEngine types the Unity package (clients/unity/) uses, so
// build.sh can compile its Runtime, Editor and CartPole sample with mono's mcs and catch
// mistakes without Unity, and tools/AgentLoop.cs can step an agent by hand. Same names
// and signatures as Unity's, behaviour reduced to what a test needs. Never copy this
// file into a Unity project (Unity has the real ones); it lives outside the package.

#if RLLINK_STUBS
using System;
using System.Collections.Generic;

namespace UnityEngine
{
    public class Object
    {
        public string name = "";
    }

    public class Component : Object
    {
        Transform ownTransform;
        GameObject ownGameObject;

        public Transform transform
        {
            get
            {
                if (ownTransform == null) ownTransform = this as Transform ?? gameObject.transform;
                return ownTransform;
            }
        }

        public GameObject gameObject
        {
            get
            {
                if (ownGameObject == null) ownGameObject = new GameObject(name, this);
                return ownGameObject;
            }
            internal set { ownGameObject = value; }
        }
    }

    public class Behaviour : Component
    {
        public bool enabled = true;
    }

    public class MonoBehaviour : Behaviour { }

    public class ScriptableObject : Object { }

    public sealed class GameObject : Object
    {
        readonly List<Component> components = new List<Component>();
        public readonly Transform transform;

        public GameObject(string name)
        {
            this.name = name;
            transform = new Transform();
            transform.gameObject = this;
            components.Add(transform);
        }

        internal GameObject(string name, Component first) : this(name)
        {
            first.gameObject = this;
            components.Add(first);
        }

        public static GameObject CreatePrimitive(PrimitiveType type) { return new GameObject(type.ToString()); }
    }

    public enum PrimitiveType { Sphere, Capsule, Cylinder, Cube, Plane, Quad }

    public class Transform : Component
    {
        public Vector3 localPosition;
        public Quaternion localRotation = Quaternion.identity;
        public Vector3 localScale = new Vector3(1, 1, 1);
        public Transform parent { get; private set; }

        public void SetParent(Transform newParent, bool worldPositionStays) { parent = newParent; }
    }

    public struct Vector3
    {
        public float x, y, z;
        public Vector3(float x, float y, float z) { this.x = x; this.y = y; this.z = z; }
        public override string ToString() { return "(" + x + ", " + y + ", " + z + ")"; }
    }

    public struct Quaternion
    {
        public float x, y, z, w;
        public Quaternion(float x, float y, float z, float w) { this.x = x; this.y = y; this.z = z; this.w = w; }
        public static Quaternion identity { get { return new Quaternion(0, 0, 0, 1); } }

        /// <summary>Degrees about z only (all the sample needs); x and y ignored.</summary>
        public static Quaternion Euler(float x, float y, float z)
        {
            double half = z * Math.PI / 360.0;
            return new Quaternion(0, 0, (float)Math.Sin(half), (float)Math.Cos(half));
        }
    }

    public static class Mathf
    {
        public const float Rad2Deg = 57.29578f;
        public const float Deg2Rad = 0.01745329f;
        public static float Sin(float f) { return (float)Math.Sin(f); }
        public static float Cos(float f) { return (float)Math.Cos(f); }
    }

    /// <summary>Unity's TextAsset; its bytes are what a file named *.bytes holds.</summary>
    public class TextAsset : Object
    {
        readonly byte[] content;
        public TextAsset(string text) { content = System.Text.Encoding.UTF8.GetBytes(text); }
        /// <summary>Stand-in only (Unity imports the file): the asset's bytes.</summary>
        public TextAsset(byte[] bytes) { content = bytes; }
        public byte[] bytes { get { return content; } }
        public string text { get { return System.Text.Encoding.UTF8.GetString(content); } }
    }

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

    public class GUIContent
    {
        public string text, tooltip;
        public GUIContent(string text, string tooltip) { this.text = text; this.tooltip = tooltip; }
    }

    public static class GUILayout
    {
        public static bool Button(GUIContent content, params GUILayoutOption[] options) { return false; }
    }

    public sealed class GUILayoutOption { }
}
#endif
