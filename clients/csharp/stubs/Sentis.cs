// Stand-ins for the Sentis 2.x / Inference Engine types SentisPolicyRuntime uses
// (clients/unity/Runtime/Unity/SentisPolicyRuntime.cs), with their documented names and
// signatures, so build.sh compiles that file with mono with RLLINK_SENTIS defined (and
// once more with RLLINK_INFERENCE_ENGINE, Unity 6's namespace). They compute nothing:
// this checks that the file compiles against the API as documented, not that it runs.
// Never copy this file into a Unity project.

#if RLLINK_STUBS && RLLINK_SENTIS
using System;
using System.Collections.Generic;
using System.IO;

#if RLLINK_INFERENCE_ENGINE
namespace Unity.InferenceEngine
#else
namespace Unity.Sentis
#endif
{
    public enum BackendType { GPUCompute, GPUPixel, CPU }

    public class ModelAsset : UnityEngine.ScriptableObject { }

    public class Model
    {
        public struct Input
        {
            public string name;
            public int index;
        }

        public struct Output
        {
            public string name;
            public int index;
        }

        public List<Input> inputs = new List<Input>();
        public List<Output> outputs = new List<Output>();
    }

    public static class ModelLoader
    {
        public static Model Load(ModelAsset modelAsset) { throw new NotImplementedException("stand-in"); }
        public static Model Load(string path) { throw new NotImplementedException("stand-in"); }
        public static Model Load(Stream stream) { throw new NotImplementedException("stand-in"); }
    }

    [Serializable]
    public struct TensorShape
    {
        public TensorShape(int d0) { }
        public TensorShape(int d0, int d1) { }
        public TensorShape(int d0, int d1, int d2) { }
        public TensorShape(int d0, int d1, int d2, int d3) { }
        public TensorShape(int d0, int d1, int d2, int d3, int d4) { }
    }

    public abstract class Tensor : IDisposable
    {
        public void Dispose() { }
    }

    public class Tensor<T> : Tensor where T : struct
    {
        public Tensor(TensorShape shape, T[] srcData, int dataStart = 0) { }
        public Tensor<T> ReadbackAndClone() { throw new NotImplementedException("stand-in"); }
        public T[] DownloadToArray() { throw new NotImplementedException("stand-in"); }
    }

    public class Worker : IDisposable
    {
        public Worker(Model model, BackendType backendType) { }
        public void Schedule(params Tensor[] inputs) { }
        public Tensor PeekOutput() { throw new NotImplementedException("stand-in"); }
        public Tensor PeekOutput(string name) { throw new NotImplementedException("stand-in"); }
        public void Dispose() { }
    }
}
#endif
