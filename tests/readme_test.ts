/** The README and docs/ agree with the code: exit codes, signals, options, examples, links. */

import { assertEquals, assertOk } from "./assert.ts";
import { ExitCode } from "../src/common/exit_codes.ts";
import { SIGNAL_TABLE } from "../src/common/signals.ts";
import { VERSION } from "../src/common/version.ts";
import { DENIT, DOCUMENTATION, ROOT, run } from "./helpers.ts";
import { HELP, OPTIONS, VARIABLES } from "../src/supervise/cli.ts";
import { statusDocument } from "../src/health/endpoint.ts";

const README = Deno.readTextFileSync(`${ROOT}README.md`);

function section(title: string, level = "###"): string {
  const start = README.indexOf(`\n${level} ${title}\n`);
  assertOk(start >= 0, `README has no "${title}" section`);
  const end = README.indexOf(`\n${level} `, start + level.length + 2);
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

Deno.test("README's Signals names every forwarded signal", () => {
  const list = /\*\*Forwarded\*\*[^:]*: ([^.]*) and the real-time/.exec(section("Signals"))?.[1];
  assertOk(list !== undefined);
  const names = list.split(",").map((name) => `SIG${name.trim()}`);
  assertEquals(
    names.sort(),
    SIGNAL_TABLE.filter((r) => r.action === "forward").map((r) => r.name).sort(),
  );
});

/** The Deno version the Makefile pins: one line for all of denit. */
const PINNED = /^DENO_VERSION := (\S+)$/m.exec(Deno.readTextFileSync(`${ROOT}Makefile`))?.[1];

Deno.test("deno.json and src/version.ts agree; denit runs on the Makefile's one runtime", async () => {
  assertEquals(JSON.parse(await Deno.readTextFile(`${ROOT}deno.json`)).version, VERSION);
  const version = await run([...DENIT, "--version"]);
  assertEquals(version.stdout, `denit ${VERSION} (deno ${PINNED})\n`);
});

/** The npm registry's newest Deno, or why it cannot be known here. */
const NEWEST = await fetch("https://registry.npmjs.org/deno/latest", {
  signal: AbortSignal.timeout(10_000),
}).then(
  async (response) => ((await response.json()) as { version: string }).version,
  (err: unknown) => new Error(`the npm registry did not answer: ${String(err)}`),
);

Deno.test({
  name: "the Makefile pins the npm registry's newest Deno (an upgrade is that one line)",
  ignore: NEWEST instanceof Error,
  fn: () => assertEquals(PINNED, NEWEST),
});
// deno-lint-ignore no-console -- an ignored test says why
if (NEWEST instanceof Error) console.warn(`SKIP the newest-Deno check: ${NEWEST.message}`);

/** One `$ command` of an example and the output written under it. */
interface Transcript {
  readonly command: string;
  readonly output: string;
}

/** The ```console blocks after a `<!-- runs in tests -->` line, in the README and docs/. */
function runnableExamples(): Transcript[][] {
  const blocks: Transcript[][] = [];
  const pattern = /<!-- runs in tests -->\n\n```console\n([\s\S]*?)\n```/g;
  for (const match of [...DOCUMENTATION.values()].flatMap((text) => [...text.matchAll(pattern)])) {
    const steps: Array<{ command: string; output: string[] }> = [];
    for (const line of (match[1] ?? "").split("\n")) {
      if (line.startsWith("$ ")) steps.push({ command: line.slice(2), output: [] });
      else steps.at(-1)?.output.push(line);
    }
    blocks.push(steps.map((step) => ({ command: step.command, output: step.output.join("\n") })));
  }
  return blocks;
}

Deno.test("the documentation's marked examples run as written and print what they show", async () => {
  const examples = runnableExamples();
  assertOk(examples.length >= 4, `only ${examples.length} examples found`);
  const bin = await Deno.makeTempDir({ prefix: "denit-readme-bin-" });
  try {
    // `denit` on PATH: the denit under test.
    const quoted = DENIT.map((word) => `'${word.replaceAll("'", `'"'"'`)}'`).join(" ");
    await Deno.writeTextFile(`${bin}/denit`, `#!/bin/sh\nexec ${quoted} "$@"\n`, { mode: 0o755 });
    for (const example of examples) {
      const tmp = await Deno.makeTempDir({ prefix: "denit-readme-" });
      try {
        for (const step of example) {
          const result = await run(["bash", "-c", step.command], {
            env: { PATH: `${bin}:${Deno.env.get("PATH") ?? "/usr/bin:/bin"}`, TMP: tmp },
            timeoutMs: 60_000,
          });
          assertEquals(result.code, 0, `$ ${step.command}\n${result.stderr}`);
          assertEquals(result.stdout.trimEnd(), step.output, `$ ${step.command}`);
        }
      } finally {
        await Deno.remove(tmp, { recursive: true });
      }
    }
  } finally {
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("--help and the README agree: usage lines, every option, every variable", () => {
  const usage = /```\n(denit \[OPTIONS\][\s\S]*?)\n```/.exec(README)?.[1]?.split("\n") ?? [];
  const helpUsage = HELP.split("\n\n")[0]?.split("\n")
    .map((line) => line.replace(/^(Usage: |\s+)/, "")) ?? [];
  assertEquals(usage, helpUsage);
  const table = section("Usage", "##");
  for (const spec of OPTIONS) {
    for (const name of spec.names) {
      assertOk(HELP.includes(name), `--help lacks ${name}`);
      assertOk(
        table.includes(`\`${name}`) || table.includes(`, \`${name}`),
        `README lacks ${name}`,
      );
    }
  }
  // The README states one rule for the variables: DENIT_ and the long name in capitals.
  for (const spec of OPTIONS) {
    if (spec.env === undefined) continue;
    const long = spec.names.find((name) => name.startsWith("--")) ?? "";
    assertEquals(spec.env, `DENIT_${long.slice(2).toUpperCase().replaceAll("-", "_")}`);
  }
  for (const variable of VARIABLES) assertOk(HELP.includes(variable), `--help lacks ${variable}`);
  assertOk(table.includes("DENIT_LOG_LEVEL=error|warn|info|debug"));
  assertOk(HELP.includes("DENIT_LOG_LEVEL=error|warn|info|debug"));
});

Deno.test("docs' /status fields are the document's fields", () => {
  const row = DOCUMENTATION.get("docs/health.md")?.split("\n")
    .find((line) => line.includes("`GET /status`")) ?? "";
  const named = new Set([...row.matchAll(/`([a-zA-Z]+)`/g)].map((m) => m[1]));
  const source = {
    snapshot: () => ({
      state: "running" as const,
      pid: 7,
      startedAtMs: 0,
      exitedAtMs: null,
      exitCode: null,
      exitSignal: null,
      zombiesReaped: 0,
      signalsForwarded: {},
      unreapedZombies: 1,
      zombieParents: [{ pid: 9, name: "python3", zombies: 1 }],
      zombiesCheckedAtMs: null,
      exitCause: "oom",
      exitReason: "the child was killed by SIGKILL",
      cleanup: null,
      stopCause: "signal" as const,
      drainingUntilMs: 0,
      deadlineAtMs: 0,
      memory: { cgroup: 2 as const, limitBytes: 1, oomGroup: true },
      jobs: { running: 1, started: 2, succeeded: 1, failed: 0, cancelled: 0 },
    }),
    settings: {
      graceSeconds: null,
      killAfterSeconds: 3,
      shutdownDelaySeconds: 0,
      drainWhile: "jobs",
      killOrphansSeconds: null,
      timeoutSeconds: null,
      user: null,
      readyWhen: "notify",
      waitDescendants: false,
      stopSignal: "SIGUSR1",
    },
    readiness: () => ({
      check: "notify",
      passing: true,
      lastResult: "READY=1",
      checkedAtMs: 0,
      status: "serving",
      ignored: 0,
    }),
    supervisorStartedAtMs: 0,
    sinceBeatMs: () => 0,
    processStats: () => ({
      residentBytes: 0,
      virtualBytes: 0,
      startTimeSeconds: 0,
      cpuSecondsTotal: 0,
      openFds: 0,
      maxFds: 0,
    }),
  };
  const document = statusDocument(source, 0);
  const keys = new Set<string>();
  const walk = (value: unknown) => {
    if (value === null || typeof value !== "object") return;
    for (const [key, inner] of Object.entries(value)) {
      if (!Array.isArray(value)) keys.add(key); // an array's items: their keys, not indices
      if (key !== "signalsForwarded") walk(inner);
    }
  };
  walk(document);
  for (const key of keys) assertOk(named.has(key), `README's /status row lacks ${key}`);
});

Deno.test("the README's first command, make demo, runs and shows what it says", async () => {
  const result = await run(["make", "-s", "-C", ROOT, "demo"], { timeoutMs: 60_000 });
  assertEquals(result.code, 0, result.stderr);
  assertOk(result.stdout.includes("child: got SIGTERM, exiting with 0"), result.stdout);
  assertOk(result.stdout.includes("demo: denit exited with 0 (the child's status)"), result.stdout);
  assertOk(/reaped count=\d+/.test(result.stderr), result.stderr);
});

Deno.test("the README is read in ten minutes: at most 350 lines, none wider than 100", () => {
  const lines = README.trimEnd().split("\n");
  assertOk(lines.length <= 350, `${lines.length} lines`);
  const wide = lines.map((line, i) => [i + 1, [...line].length]).filter(([, n]) => (n ?? 0) > 100);
  assertEquals(wide, []);
});

Deno.test("every relative link of the README and docs/ names a file that exists", () => {
  for (const [name, text] of DOCUMENTATION) {
    const base = new URL(name, `file://${ROOT}`);
    for (const match of text.matchAll(/\]\(([^)#\s]+)(#[^)]*)?\)/g)) {
      const target = match[1] ?? "";
      if (/^[a-z]+:/.test(target)) continue;
      const path = new URL(target, base).pathname;
      assertOk(Deno.statSync(path) !== null, `${name}: ${target}`);
    }
  }
});
