/** The README's tables and the code agree: exit codes, signals, version. */

import { assertEquals, assertOk } from "./assert.ts";
import { ExitCode } from "../src/common/exit_codes.ts";
import { FORWARDED } from "../src/supervise/signals.ts";
import { VERSION } from "../src/common/version.ts";
import { ROOT } from "./helpers.ts";

const README = Deno.readTextFileSync(`${ROOT}README.md`);

function section(title: string): string {
  const start = README.indexOf(`### ${title}`);
  assertOk(start >= 0, `README has no "${title}" section`);
  const end = README.indexOf("\n#", start + 4);
  return README.slice(start, end < 0 ? undefined : end);
}

Deno.test("README exit-code table lists exactly the codes of exit_codes.ts", () => {
  const codes = section("Exit codes").split("\n")
    .map((line) => /^\|\s*(\d+)\s*\|/.exec(line)?.[1])
    .filter((code): code is string => code !== undefined)
    .map(Number)
    .sort((a, b) => a - b);
  const expected = Object.entries(ExitCode)
    .filter(([name]) => name !== "SIGNAL_BASE")
    .map(([, code]) => code)
    .sort((a, b) => a - b);
  assertEquals(codes, expected);
  assertOk(section("Exit codes").includes(`${ExitCode.SIGNAL_BASE}+N`));
});

Deno.test("README signal table names every forwarded signal", () => {
  const row = section("Signals").split("\n").find((line) => line.includes("forward to the child"));
  assertOk(row !== undefined);
  const names = (row.split("|")[1] ?? "").split(",").map((name) => `SIG${name.trim()}`);
  assertEquals(names.sort(), FORWARDED.map((r) => r.name).sort());
});

Deno.test("deno.json and src/version.ts agree on the version; Makefile pins Deno 2.9.1", () => {
  assertEquals(JSON.parse(Deno.readTextFileSync(`${ROOT}deno.json`)).version, VERSION);
  assertOk(/^DENO_VERSION := 2\.9\.1$/m.test(Deno.readTextFileSync(`${ROOT}Makefile`)));
});
