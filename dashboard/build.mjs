// Copies the built YASGUI bundle (the SPARQL editor of the dashboard) from node_modules into the Python package,
// so that the dashboard serves it itself and nothing loads from the network. Run from dashboard/:
//   npm ci --ignore-scripts && npm run build        (or: make dashboard-assets)
// The output is committed (YASGUI is MIT-licensed; its licence and its bundled dependencies' notices are copied
// with it), so an install or CI run needs no npm. manifest.json records the version and each file's SHA-256.
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, "node_modules", "@triply", "yasgui");
const out = join(here, "..", "debugtune", "static", "yasgui");
const files = {
  "yasgui.min.js": join(pkg, "build", "yasgui.min.js"),
  "yasgui.min.css": join(pkg, "build", "yasgui.min.css"),
  "LICENSE.txt": join(pkg, "LICENSE.txt"),
  "yasgui.min.js.LICENSE.txt": join(pkg, "build", "yasgui.min.js.LICENSE.txt"),
};

let version;
try {
  version = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).version;
} catch {
  console.error("error: node_modules/@triply/yasgui is missing; run `npm ci --ignore-scripts` in dashboard/ first");
  process.exit(2);
}
const wanted = JSON.parse(readFileSync(join(here, "package.json"), "utf8")).dependencies["@triply/yasgui"];
if (version !== wanted) {
  console.error(`error: node_modules holds @triply/yasgui ${version}, package.json pins ${wanted}; run npm ci`);
  process.exit(2);
}
mkdirSync(out, { recursive: true });
const sha256 = {};
for (const [name, src] of Object.entries(files)) {
  copyFileSync(src, join(out, name));
  sha256[name] = createHash("sha256").update(readFileSync(src)).digest("hex");
}
const manifest = { package: "@triply/yasgui", version, license: "MIT", source: "https://www.npmjs.com/package/@triply/yasgui", sha256 };
writeFileSync(join(out, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n");
console.log(`copied @triply/yasgui ${version} into ${out}`);
