#!/usr/bin/env python3
"""Turn built function binaries into what a deployment without a Rust toolchain needs
(`make package` runs it after the arm64 build; `scripts/check-template.sh` runs it on fake
binaries):

  OUT/<binary>.zip         each function's deployment package: `bootstrap` (mode 0755),
                           deterministic (fixed timestamps), as Lambda's provided.al2023 wants
  OUT/<stack>.yaml         each writer stack with CodeUri: <binary>.zip beside it and the
                           AWS::ServerlessRepo::Application metadata: `sam deploy
                           --template-file OUT/<stack>.yaml --s3-bucket B` (or `aws
                           cloudformation package`, then `sam publish`)
  OUT/<stack>.s3.yaml      the same with the code already in S3: parameters CodeBucket and
                           CodeKeyPrefix (<CodeKeyPrefix><binary>.zip)
  OUT/README.md            docs/deploy.md, the SAR entries' ReadmeUrl

Usage: package_templates.py [--lambda-dir DIR (target/lambda)] [--out DIR (target/package)]
Exit status 1 when a function's binary is missing.
"""

import glob
import importlib.util
import os
import shutil
import sys
import tomllib
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 1980-01-01, the earliest time a zip entry can hold: the same binary gives the same zip.
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def gen_stacks():
    spec = importlib.util.spec_from_file_location("gen_stacks", os.path.join(ROOT, "scripts", "gen-stacks.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def binaries():
    names = []
    for manifest in sorted(glob.glob(os.path.join(ROOT, "functions", "*", "Cargo.toml"))):
        with open(manifest, "rb") as f:
            cargo = tomllib.load(f)
        names += [b["name"] for b in cargo.get("bin", [])] or [cargo["package"]["name"]]
    return names


def zip_bootstrap(binary, target):
    info = zipfile.ZipInfo("bootstrap", date_time=FIXED_TIME)
    info.external_attr = (0o100755 << 16)  # a regular file, rwxr-xr-x: Lambda executes it
    info.compress_type = zipfile.ZIP_DEFLATED
    with open(binary, "rb") as f:
        data = f.read()
    with zipfile.ZipFile(target, "w") as z:
        z.writestr(info, data, compresslevel=9)
    return len(data), os.path.getsize(target)


def main(argv):
    lambda_dir = argv[argv.index("--lambda-dir") + 1] if "--lambda-dir" in argv else os.path.join(ROOT, "target", "lambda")
    out = argv[argv.index("--out") + 1] if "--out" in argv else os.path.join(ROOT, "target", "package")
    os.makedirs(out, exist_ok=True)
    missing = [b for b in binaries() if not os.path.isfile(os.path.join(lambda_dir, b, "bootstrap"))]
    if missing:
        print(f"package: no {', '.join(os.path.join(lambda_dir, b, 'bootstrap') for b in missing)}: "
              "build first (make package)", file=sys.stderr)
        return 1
    print(f"{'function':<18} {'bootstrap (B)':>14} {'zipped (B)':>14}")
    for b in binaries():
        size, zipped = zip_bootstrap(os.path.join(lambda_dir, b, "bootstrap"), os.path.join(out, b + ".zip"))
        print(f"{b:<18} {size:>14} {zipped:>14}")
    gen = gen_stacks()
    source_url = os.environ.get("SAR_SOURCE_URL", gen.DEFAULT_SOURCE_URL)
    for name in gen.stacks():
        for mode, suffix in (("zip", ".yaml"), ("s3", ".s3.yaml")):
            with open(os.path.join(out, name + suffix), "w") as f:
                f.write(gen.generate(name, mode, source_url))
    shutil.copyfile(os.path.join(ROOT, "docs", "deploy.md"), os.path.join(out, "README.md"))
    print(f"package: {out}: {len(binaries())} zips, {len(gen.stacks())} stacks packaged "
          "(<stack>.yaml: code beside; <stack>.s3.yaml: code in S3)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
