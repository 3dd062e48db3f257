#!/usr/bin/env bash
# Build the C# kit with mono's mcs (Debian: apt-get install -y mono-mcs mono-runtime):
#   build/RLlink.dll          the client library (src/): what a game references or copies
#   build/CartPole.exe        the example (example/ + src/), run with mono
#   build/OnnxRun.exe         runs an ONNX policy with MlpPolicyRuntime (tools/; for tests)
#   build/RLlinkUnity.check.dll  the Unity adapter (unity/) compiled against stand-ins of the
#                             few UnityEngine types it uses (unity/stubs/), to catch errors
#                             without Unity; never ship it
# Language level C# 6 (-langversion:6): Unity 2017+ and mcs both compile it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

if ! command -v mcs >/dev/null 2>&1; then
  echo "build.sh: mcs not found; on Debian/Ubuntu: apt-get install -y mono-mcs mono-runtime" >&2
  exit 127
fi

mkdir -p build
flags=(-langversion:6 -nologo -optimize+ -warnaserror+ -r:System.dll -r:System.Core.dll)
src=(src/*.cs)

mcs "${flags[@]}" -target:library -out:build/RLlink.dll "${src[@]}"
mcs "${flags[@]}" -target:exe -out:build/CartPole.exe "${src[@]}" example/*.cs
mcs "${flags[@]}" -target:exe -out:build/OnnxRun.exe "${src[@]}" tools/OnnxRun.cs
mcs "${flags[@]}" -target:library -out:build/RLlinkUnity.check.dll -define:RLLINK_STUBS \
  "${src[@]}" unity/*.cs unity/stubs/*.cs

echo "built: $(cd build && ls RLlink.dll CartPole.exe OnnxRun.exe RLlinkUnity.check.dll | tr '\n' ' ')"
