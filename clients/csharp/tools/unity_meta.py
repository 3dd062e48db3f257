"""Write the .meta file of every asset and folder of the Unity package (clients/unity/).

Unity keeps an asset's identity (its GUID) and import settings in a .meta file beside it.
In Assets/ or an embedded or local package it writes missing ones itself, but a package
installed by Git URL is immutable: Unity ignores an asset without its .meta there ("has
no meta file, but it's in an immutable folder"). So the package carries them.

Each GUID is derived from the package name and the asset's path (the md5 of
"com.rllink.gateway-client:<path>"): stable, unique, and rewritten identically, so this
script only adds what is missing (and, with --check, changes nothing and says what is
missing or orphaned). Folders ending in ~ (Samples~) are hidden from Unity: no .meta
inside them (Unity writes them when the sample is imported into Assets/).

    .venv/bin/python clients/csharp/tools/unity_meta.py          # add missing .meta files
    .venv/bin/python clients/csharp/tools/unity_meta.py --check  # exit 1 if any is missing or orphaned
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "unity"
NAME = "com.rllink.gateway-client"

FOOTER = "  externalObjects: {}\n  userData:\n  assetBundleName:\n  assetBundleVariant:\n"
IMPORTERS = {
    ".cs": "MonoImporter:\n  externalObjects: {}\n  serializedVersion: 2\n  defaultReferences: []\n  executionOrder: 0\n"
    "  icon: {instanceID: 0}\n  userData:\n  assetBundleName:\n  assetBundleVariant:\n",
    ".asmdef": "AssemblyDefinitionImporter:\n" + FOOTER,
    ".md": "TextScriptImporter:\n" + FOOTER,
    ".json": "PackageManifestImporter:\n" + FOOTER,  # package.json, the only JSON asset here
    # A .jslib is JavaScript for WebGL players only: the plugin is on for WebGL, off elsewhere.
    ".jslib": "PluginImporter:\n  externalObjects: {}\n  serializedVersion: 2\n  iconMap: {}\n  executionOrder: {}\n"
    "  defineConstraints: []\n  isPreloaded: 0\n  isOverridable: 0\n  isExplicitlyReferenced: 0\n  validateReferences: 1\n"
    "  platformData:\n  - first:\n      Any:\n    second:\n      enabled: 0\n      settings: {}\n"
    "  - first:\n      Editor: Editor\n    second:\n      enabled: 0\n      settings:\n        DefaultValueInitialized: true\n"
    "  - first:\n      WebGL: WebGL\n    second:\n      enabled: 1\n      settings: {}\n"
    "  userData:\n  assetBundleName:\n  assetBundleVariant:\n",
}
FOLDER = "folderAsset: yes\nDefaultImporter:\n" + FOOTER


def guid(relative: str) -> str:
    return hashlib.md5(f"{NAME}:{relative}".encode()).hexdigest()


def assets(root: Path = PACKAGE) -> list[Path]:
    """Every file and folder Unity imports: not .meta files, not hidden ones (. or ~)."""
    found = []
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if any(part.startswith(".") or part.endswith("~") for part in parts) or path.suffix == ".meta":
            continue
        found.append(path)
    return found


def meta_text(path: Path, root: Path = PACKAGE) -> str:
    relative = path.relative_to(root).as_posix()
    if path.is_dir():
        body = FOLDER
    elif path.suffix in IMPORTERS:
        body = IMPORTERS[path.suffix]
    else:
        raise SystemExit(f"unity_meta.py: no importer known for {relative}; add one to IMPORTERS")
    return f"fileFormatVersion: 2\nguid: {guid(relative)}\n{body}"


def problems(root: Path = PACKAGE) -> list[str]:
    """Assets without a .meta, and .meta files without their asset."""
    wanted = {path.with_name(path.name + ".meta") for path in assets(root)}
    metas = {path for path in root.rglob("*.meta") if not any(p.endswith("~") for p in path.relative_to(root).parts)}
    return [f"missing: {m.relative_to(root)}" for m in sorted(wanted - metas)] + [
        f"orphaned: {m.relative_to(root)}" for m in sorted(metas - wanted)
    ]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        found = problems()
        print("\n".join(found) or "every asset has its .meta")
        return 1 if found else 0
    for path in assets():
        meta = path.with_name(path.name + ".meta")
        if not meta.exists():
            meta.write_text(meta_text(path))
            print(f"wrote {meta.relative_to(PACKAGE)}")
    orphans = [p for p in problems() if p.startswith("orphaned")]
    print("\n".join(orphans))
    return 1 if orphans else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
