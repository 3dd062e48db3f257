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
        /// <summary>Stand-in: no parents' transforms are applied (the local values are the world's).</summary>
        public Vector3 position { get { return localPosition; } set { localPosition = value; } }
        public Quaternion rotation { get { return localRotation; } set { localRotation = value; } }
        public Vector3 forward { get { return localRotation * new Vector3(0, 0, 1); } }
        public Vector3 up { get { return localRotation * new Vector3(0, 1, 0); } }

        public void SetParent(Transform newParent, bool worldPositionStays) { parent = newParent; }
    }

    public struct Vector3
    {
        public float x, y, z;
        public Vector3(float x, float y, float z) { this.x = x; this.y = y; this.z = z; }
        public static Vector3 operator +(Vector3 a, Vector3 b) { return new Vector3(a.x + b.x, a.y + b.y, a.z + b.z); }
        public static Vector3 operator *(Vector3 a, float k) { return new Vector3(a.x * k, a.y * k, a.z * k); }
        public static float Dot(Vector3 a, Vector3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
        public override string ToString() { return "(" + x + ", " + y + ", " + z + ")"; }
    }

    public struct Quaternion
    {
        public float x, y, z, w;
        public Quaternion(float x, float y, float z, float w) { this.x = x; this.y = y; this.z = z; this.w = w; }
        public static Quaternion identity { get { return new Quaternion(0, 0, 0, 1); } }

        /// <summary>A rotation of <paramref name="angle"/> degrees about <paramref name="axis"/> (a unit vector).</summary>
        public static Quaternion AngleAxis(float angle, Vector3 axis)
        {
            double half = angle * Math.PI / 360.0;
            float s = (float)Math.Sin(half);
            return new Quaternion(axis.x * s, axis.y * s, axis.z * s, (float)Math.Cos(half));
        }

        /// <summary>The vector rotated: v + 2w(q x v) + 2 q x (q x v), q the vector part.</summary>
        public static Vector3 operator *(Quaternion r, Vector3 v)
        {
            var q = new Vector3(r.x, r.y, r.z);
            Vector3 t = Cross(q, v) * 2f;
            return v + t * r.w + Cross(q, t);
        }

        static Vector3 Cross(Vector3 a, Vector3 b)
        {
            return new Vector3(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
        }

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
        public static float Clamp01(float f) { return f < 0 ? 0 : f > 1 ? 1 : f; }
    }

    /// <summary>Unity's game clock; the stand-in only holds the scale the agent sets.</summary>
    public static class Time
    {
        public static float timeScale = 1f;
    }

    public struct LayerMask
    {
        public int value;
        public static implicit operator int(LayerMask mask) { return mask.value; }
        public static implicit operator LayerMask(int value) { return new LayerMask { value = value }; }
    }

    public struct RaycastHit
    {
        public float distance;
        public Vector3 point;
    }

    /// <summary>Unity's physics, reduced to rays against infinite planes a test places (StubPlanes:
    /// the points p with Dot(normal, p) = offset), every plane on layer 0.</summary>
    public static class Physics
    {
        public static readonly List<KeyValuePair<Vector3, float>> StubPlanes = new List<KeyValuePair<Vector3, float>>();

        public static bool Raycast(Vector3 origin, Vector3 direction, out RaycastHit hitInfo, float maxDistance, int layerMask)
        {
            hitInfo = new RaycastHit { distance = float.PositiveInfinity };
            if ((layerMask & 1) == 0) return false;
            foreach (var plane in StubPlanes)
            {
                float along = Vector3.Dot(plane.Key, direction);
                if (Math.Abs(along) < 1e-9f) continue;
                float distance = (plane.Value - Vector3.Dot(plane.Key, origin)) / along;
                if (distance >= 0 && distance <= maxDistance && distance < hitInfo.distance)
                    hitInfo = new RaycastHit { distance = distance, point = origin + direction * distance };
            }
            return !float.IsPositiveInfinity(hitInfo.distance);
        }
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
