#!/usr/bin/env bash
# Build the C# kit with mono's mcs (Debian: apt-get install -y mono-mcs mono-runtime). The
# sources are the Unity package's, clients/unity/ (one copy: what CI compiles is what a
# Unity project installs); this folder holds only what is not part of the package.
#
#   build/RLlink.dll         the plain C# client (the package's Runtime/Core/: no Unity types),
#                            for a .NET or mono game outside Unity
#   build/CartPole.exe       the console example (example/ + Runtime/Core/ + the CartPole
#                            sample's physics), run with mono
#   build/OnnxRun.exe        runs an ONNX policy with MlpPolicyRuntime, names given (tools/; for tests)
#   build/PlayOnnx.exe       plays a bundled ONNX file with MlpPolicyRuntime.FromFile and
#                            OnnxPolicy, no gateway (tools/; for tests)
#   build/unity/             the package compiled the way Unity splits it into assemblies,
#                            against stand-ins of the UnityEngine, UnityEditor and Sentis
#                            types it uses (stubs/, outside the package), to catch errors
#                            without Unity; never ship these:
#     UnityEngine.dll, UnityEditor.dll    the stand-ins
#     RLlink.Runtime.dll                  Runtime/**/*.cs (RLlink.Runtime.asmdef)
#     RLlink.Runtime.Sentis.check.dll     the same with RLLINK_SENTIS (Sentis 2.x stand-ins)
#     RLlink.Runtime.InferenceEngine.check.dll   ... and RLLINK_INFERENCE_ENGINE (Unity 6's names)
#     RLlink.Editor.dll                   Editor/**/*.cs (RLlink.Editor.asmdef)
#     CartPoleSample.dll                  Samples~/CartPole/*.cs
#     AgentLoop.exe                       steps the sample's agent by hand (tools/AgentLoop.cs)
# Language level C# 6 (-langversion:6): Unity 2017+ and mcs both compile it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
package="$(cd "$here/../unity" && pwd)"
cd "$here"

if ! command -v mcs >/dev/null 2>&1; then
  echo "build.sh: mcs not found; on Debian/Ubuntu: apt-get install -y mono-mcs mono-runtime" >&2
  exit 127
fi

# Every .cs file under a folder, sorted (as an asmdef takes its folder's tree).
sources() { find "$1" -name '*.cs' -print | LC_ALL=C sort; }

mkdir -p build/unity
flags=(-langversion:6 -nologo -optimize+ -warnaserror+ -r:System.dll -r:System.Core.dll)
mapfile -t core < <(sources "$package/Runtime/Core")
mapfile -t runtime < <(sources "$package/Runtime")
mapfile -t editor < <(sources "$package/Editor")
mapfile -t sample < <(sources "$package/Samples~/CartPole")
physics="$package/Samples~/CartPole/CartPolePhysics.cs"

mcs "${flags[@]}" -target:library -out:build/RLlink.dll "${core[@]}"
mcs "${flags[@]}" -target:exe -out:build/CartPole.exe "${core[@]}" "$physics" example/*.cs
mcs "${flags[@]}" -target:exe -out:build/OnnxRun.exe "${core[@]}" tools/OnnxRun.cs
mcs "${flags[@]}" -target:exe -out:build/PlayOnnx.exe "${core[@]}" tools/PlayOnnx.cs

u=build/unity
stub=(-define:RLLINK_STUBS)
mcs "${flags[@]}" "${stub[@]}" -target:library -out:$u/UnityEngine.dll stubs/UnityEngine.cs
mcs "${flags[@]}" "${stub[@]}" -target:library -out:$u/UnityEditor.dll -r:$u/UnityEngine.dll stubs/UnityEditor.cs
mcs "${flags[@]}" -target:library -out:$u/RLlink.Runtime.dll -r:$u/UnityEngine.dll "${runtime[@]}"
for variant in Sentis InferenceEngine; do
  defines=(-define:RLLINK_SENTIS)
  [ "$variant" = InferenceEngine ] && defines+=(-define:RLLINK_INFERENCE_ENGINE)
  mcs "${flags[@]}" "${stub[@]}" "${defines[@]}" -target:library -out:$u/$variant.stub.dll -r:$u/UnityEngine.dll stubs/Sentis.cs
  mcs "${flags[@]}" "${defines[@]}" -target:library -out:$u/RLlink.Runtime.$variant.check.dll \
    -r:$u/UnityEngine.dll -r:$u/$variant.stub.dll "${runtime[@]}"
done
mcs "${flags[@]}" -target:library -out:$u/RLlink.Editor.dll \
  -r:$u/UnityEngine.dll -r:$u/UnityEditor.dll -r:$u/RLlink.Runtime.dll "${editor[@]}"
mcs "${flags[@]}" -target:library -out:$u/CartPoleSample.dll -r:$u/UnityEngine.dll -r:$u/RLlink.Runtime.dll "${sample[@]}"
mcs "${flags[@]}" -target:exe -out:$u/AgentLoop.exe -r:$u/UnityEngine.dll -r:$u/UnityEditor.dll -r:$u/RLlink.Runtime.dll \
  -r:$u/RLlink.Editor.dll -r:$u/CartPoleSample.dll tools/AgentLoop.cs

echo "built: $(cd build && ls RLlink.dll CartPole.exe OnnxRun.exe PlayOnnx.exe | tr '\n' ' ')$(cd build && ls unity/*.dll unity/*.exe | tr '\n' ' ')"
