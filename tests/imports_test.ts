/**
 * The layout holds: imports point down (entries → programs → common and sys), no program
 * imports another, and nothing in src/ imports an entry. Every import counts, `import type`
 * and dynamic `import()` included. One exception, the job feature being one folder: its PID-1
 * half (src/jobs/host.ts and the contract it shares with the service, contract.ts) is what
 * supervise may import, and that half imports nothing else of the feature, so that denit.js
 * carries none of the service's code.
 */

import { assertEquals } from "./assert.ts";
import { ROOT } from "./helpers.ts";

const PROGRAMS = ["supervise", "health", "copy", "jobs"];

/** "common", "sys", a program's name, "entry", "contract" (proto/), or "outside". */
function roomOf(path: string): string {
  if (["mod.ts", "features.ts"].includes(path)) return "entry";
  if (path.startsWith("proto/")) return "contract";
  const match = /^src\/([^/]+)\//.exec(path);
  return match?.[1] ?? "outside";
}

function resolve(from: string, specifier: string): string {
  const parts = from.split("/").slice(0, -1);
  for (const part of specifier.split("/")) {
    if (part === "..") parts.pop();
    else if (part !== ".") parts.push(part);
  }
  return parts.join("/");
}

function sources(dir: string): string[] {
  const found: string[] = [];
  for (const entry of Deno.readDirSync(`${ROOT}${dir}`)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) found.push(...sources(path));
    else if (entry.name.endsWith(".ts")) found.push(path);
  }
  return found;
}

function importsOf(path: string): string[] {
  const text = Deno.readTextFileSync(`${ROOT}${path}`);
  const specifiers = [
    ...text.matchAll(/(?:^|\n)\s*(?:import|export)[^;]*?from\s+"([^"]+)"/g),
    ...text.matchAll(/import\(\s*"([^"]+)"\s*\)/g),
  ].map((m) => m[1] ?? "");
  return specifiers.filter((s) => s.startsWith(".")).map((s) => resolve(path, s));
}

/** The job feature's half that PID 1 runs (bundled into denit.js). */
const JOBS_PID1_HALF = ["src/jobs/host.ts", "src/jobs/contract.ts"];

function allowed(from: string, to: string): boolean {
  const a = roomOf(from);
  const b = roomOf(to);
  if (JOBS_PID1_HALF.includes(from) && (b === "jobs" || b === "contract")) {
    return JOBS_PID1_HALF.includes(to);
  }
  if (a === "supervise" && b === "jobs") return JOBS_PID1_HALF.includes(to);
  if (a === "entry") return true; // mod.ts loads the optional half's entry (features.ts)
  if (b === "entry") return false; // nothing else imports an entry
  if (a === "common" || a === "sys") return b === a; // the bottom: only itself
  if (b === "contract") return a === "jobs"; // the job service's .proto, read as text
  if (PROGRAMS.includes(a)) return b === a || b === "common" || b === "sys";
  return false;
}

Deno.test("imports point down and no program imports another", () => {
  const files = ["mod.ts", "features.ts", ...sources("src")];
  const wrong: string[] = [];
  for (const file of files) {
    for (const target of importsOf(file)) {
      if (!allowed(file, target)) wrong.push(`${file} -> ${target}`);
    }
  }
  assertEquals(wrong, []);
});

Deno.test("the import check can fail: a program importing another is caught", () => {
  assertEquals(allowed("src/health/endpoint.ts", "src/supervise/machine.ts"), false);
  assertEquals(allowed("src/common/log.ts", "src/sys/process.ts"), false);
  assertEquals(allowed("src/copy/tree.ts", "mod.ts"), false);
  assertEquals(allowed("src/copy/tree.ts", "src/sys/files.ts"), true);
  assertEquals(allowed("src/jobs/host.ts", "proto/denit/jobs/v1/jobs.proto"), false);
  assertEquals(allowed("src/supervise/main.ts", "src/jobs/host.ts"), true);
  assertEquals(allowed("src/supervise/main.ts", "src/jobs/service.ts"), false);
  assertEquals(allowed("src/jobs/host.ts", "src/jobs/store.ts"), false);
  assertEquals(allowed("src/jobs/service.ts", "src/jobs/contract.ts"), true);
});
