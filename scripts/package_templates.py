#!/usr/bin/env python3
"""Turn built function binaries into what a deployment without a Rust toolchain needs
(`make package` runs it after the arm64 build; `scripts/check-template.sh` runs it on fake
binaries):

  OUT/<binary>.zip         each function's deployment package: `bootstrap` (mode 0755),
                           deterministic (fixed timestamps), as Lambda's provided.al2023 wants
  OUT/<stack>.yaml         each writer stack (stacks/<stack>.yaml) with CodeUri: <binary>.zip
                           beside it instead of the cargo workspace, and the
                           AWS::ServerlessRepo::Application metadata: `sam deploy
                           --template-file OUT/<stack>.yaml --s3-bucket B` (or `sam package`)
  OUT/<stack>.s3.yaml      the same with the code already in S3: parameters CodeBucket and
                           CodeKeyPrefix (<CodeKeyPrefix><binary>.zip)
  OUT/shared/*.yaml        the stacks they nest (stacks/shared), at the same relative Location
  OUT/README.md            docs/deploy.md, the SAR entries' ReadmeUrl

Usage: package_templates.py [--lambda-dir DIR (target/lambda)] [--out DIR (target/package)]
Exit status 1 when a function's binary is missing.
"""

import glob
import os
import re
import shutil
import sys
import tomllib
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 1980-01-01, the earliest time a zip entry can hold: the same binary gives the same zip.
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


SOURCE_URL = os.environ.get("SAR_SOURCE_URL", "https://github.com/OWNER/dynamodb-exactly-once")
WORKSPACE_CODE = "    # The cargo workspace (paths are relative to this template).\n    CodeUri: ..\n"
FUNCTION = re.compile(r"^        Binary: ([a-z0-9-]+)\n    Properties:\n", re.M)
S3_PARAMETERS = """  # ------------------------------------------------------------ code
  CodeBucket:
    Type: String
    AllowedPattern: "^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
    Description: >
      The S3 bucket (in the stack's region) holding the functions' zips (make package writes
      them to target/package/<binary>.zip).
  CodeKeyPrefix:
    Type: String
    Default: ""
    AllowedPattern: "^[A-Za-z0-9!_.*'()/-]*$"
    Description: >
      Key prefix of the zips in CodeBucket, ending in "/" when not empty: each function's code
      is CodeBucket/<CodeKeyPrefix><binary>.zip.

"""


def version():
    with open(os.path.join(ROOT, "Cargo.toml"), "rb") as f:
        return tomllib.load(f)["workspace"]["package"]["version"]


def sar_metadata(name, text):
    """The Serverless Application Repository entry (`sam publish` after `sam package`)."""
    summary = re.search(r"^Description: >\n((?:  .*\n)+)", text, re.M).group(1)
    summary = " ".join(summary.split()).split(". ")[0].replace(":", " -")[:250]
    return (f"  # The Serverless Application Repository entry (`sam publish` after `sam package`). Set\n"
            f"  # SAR_SOURCE_URL when packaging to name the public repository (docs/deploy.md).\n"
            f"  AWS::ServerlessRepo::Application:\n    Name: dynamodb-exactly-once-{name}\n"
            f"    Description: {summary}.\n    Author: dynamodb-exactly-once\n    SpdxLicenseId: MIT\n"
            f"    ReadmeUrl: README.md\n    Labels: [dynamodb, exactly-once, rust]\n"
            f"    HomePageUrl: {SOURCE_URL}\n    SemanticVersion: {version()}\n"
            f"    SourceCodeUrl: {SOURCE_URL}\n")


def packaged(name, text, code):
    """stacks/<name>.yaml with each function's code the binary's zip (code "zip": beside the
    template; "s3": in CodeBucket at CodeKeyPrefix)."""
    if WORKSPACE_CODE not in text:
        raise SystemExit(f"package: stacks/{name}.yaml has no Globals CodeUri `..` (the workspace)")
    text = text.replace(WORKSPACE_CODE, "")
    if code == "zip":
        head = ("# stacks/{}.yaml packaged by `make package`: the functions' code is the zips beside "
                "this\n# template (sam deploy --template-file uploads them). See docs/deploy.md.\n")
        text = text.replace("\nMetadata:\n", "\nMetadata:\n" + sar_metadata(name, text), 1)
        body = "      CodeUri: {0}.zip\n"
    else:
        head = "# stacks/{}.yaml packaged by `make package`: the functions' code is in S3 (CodeBucket, CodeKeyPrefix). See docs/deploy.md.\n"
        text = text.replace("\nParameters:\n", "\nParameters:\n" + S3_PARAMETERS, 1)
        body = ("      # The function's zip, already in S3.\n      CodeUri:\n        Bucket: !Ref CodeBucket\n"
                "        Key: !Sub \"${{CodeKeyPrefix}}{0}.zip\"\n")
    text = FUNCTION.sub(lambda m: m.group(0) + body.format(m.group(1)), text)
    return head.format(name) + text


def stacks():
    return sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(ROOT, "stacks", "*.yaml")))


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
    for name in stacks():
        with open(os.path.join(ROOT, "stacks", name + ".yaml"), encoding="utf-8") as f:
            text = f.read()
        for code, suffix in (("zip", ".yaml"), ("s3", ".s3.yaml")):
            with open(os.path.join(out, name + suffix), "w", encoding="utf-8") as f:
                f.write(packaged(name, text, code))
    shutil.copytree(os.path.join(ROOT, "stacks", "shared"), os.path.join(out, "shared"), dirs_exist_ok=True)
    shutil.copyfile(os.path.join(ROOT, "docs", "deploy.md"), os.path.join(out, "README.md"))
    print(f"package: {out}: {len(binaries())} zips, {len(stacks())} stacks packaged "
          "(<stack>.yaml: code beside; <stack>.s3.yaml: code in S3)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
