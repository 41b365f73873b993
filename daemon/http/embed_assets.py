#!/usr/bin/env python3
"""Writes a C++ source holding the dashboard's files (daemon/http/dashboard_assets.h): each
argument is NAME=PATH; the content type follows from NAME's extension. Run by a genrule, so
the dashboard needs no files at run time and no internet (Dygraphs comes from Debian)."""
import sys

TYPES = {".html": "text/html; charset=utf-8", ".js": "application/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8"}


def main():
    out = open(sys.argv[1], "w")
    out.write('#include "daemon/http/dashboard_assets.h"\n\nnamespace dtrain::daemon {\n'
              "namespace {\n")
    entries = []
    for i, arg in enumerate(sys.argv[2:]):
        name, path = arg.split("=", 1)
        data = open(path, "rb").read()
        kind = next(t for ext, t in TYPES.items() if name.endswith(ext))
        out.write(f"const unsigned char kAsset{i}[] = {{")
        out.write(",".join(str(b) for b in data))
        out.write("};\n")
        entries.append(f'{{"{name}", "{kind}", kAsset{i}, {len(data)}}}')
    out.write("}  // namespace\n\nconst DashboardAsset* find_dashboard_asset(const std::string& name) {\n"
              "  static const DashboardAsset kAssets[] = {" + ", ".join(entries) + "};\n"
              "  for (const DashboardAsset& a : kAssets)\n"
              "    if (name == a.name) return &a;\n"
              "  return nullptr;\n}\n\n}  // namespace dtrain::daemon\n")


main()
