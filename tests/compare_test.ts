/**
 * The same scenario under tini and under denit: both must give the expected result. A
 * scenario tini fails would be a wrong test (tini is the drop-in denit replaces).
 */

import { assertEquals } from "./assert.ts";
import { CAN_UNSHARE, DENIT, FIXTURES, PIDNS, run } from "./helpers.ts";

const HAS_TINI = new Deno.Command("tini", { args: ["--version"], stdout: "null", stderr: "null" })
  .outputSync().success;

/** Each supervisor's argv up to and including "--", as a subreaper. */
const SUBREAPERS: Record<string, readonly string[]> = {
  tini: ["tini", "-s", "--"],
  denit: [...DENIT, "-s", "--"],
};

interface Scenario {
  readonly name: string;
  readonly command: readonly string[];
  readonly code: number;
  readonly stdout?: string;
  readonly env?: Record<string, string>;
  readonly clearEnv?: boolean;
}

const dir = Deno.makeTempDirSync({ prefix: "denit-compare-" });
Deno.writeTextFileSync(`${dir}/plain`, 'echo from-sh "$1"\nexit 4\n', { mode: 0o755 });
Deno.writeTextFileSync(`${dir}/noexec`, "#!/bin/sh\nexit 0\n", { mode: 0o644 });
globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));

const SCENARIOS: readonly Scenario[] = [
  { name: "an exit code passes through", command: ["sh", "-c", "exit 3"], code: 3 },
  { name: "255 passes through", command: ["sh", "-c", "exit 255"], code: 255 },
  { name: "death by SIGTERM is 143", command: ["sh", "-c", "kill -TERM $$"], code: 143 },
  { name: "death by SIGKILL is 137", command: ["sh", "-c", "kill -KILL $$"], code: 137 },
  {
    name: "a SIGTERM to the supervisor reaches the child",
    command: ["sh", "-c", "trap 'exit 7' TERM; kill -TERM $PPID; while :; do sleep 0.02; done"],
    code: 7,
  },
  { name: "a command not found is 127", command: ["no-such-command-xyz"], code: 127 },
  { name: "a file that is not executable is 126", command: [`${dir}/noexec`], code: 126 },
  {
    name: "a script without #! runs through /bin/sh, as execvp does",
    command: [`${dir}/plain`, "arg"],
    code: 4,
    stdout: "from-sh arg\n",
  },
  {
    name: "PATH unset: the C library's default path",
    command: ["true"],
    code: 0,
    env: { HOME: "/" },
    clearEnv: true,
  },
];

for (const scenario of SCENARIOS) {
  Deno.test({
    name: `tini and denit alike: ${scenario.name}`,
    ignore: !HAS_TINI, // tini is a Debian package that CI installs
    async fn() {
      for (const [supervisor, argv] of Object.entries(SUBREAPERS)) {
        const [program = "", ...args] = [...argv, ...scenario.command];
        const out = await new Deno.Command(program, {
          args,
          env: scenario.env ?? {},
          clearEnv: scenario.clearEnv ?? false,
          stdout: "piped",
          stderr: "piped",
        }).output();
        const stdout = new TextDecoder().decode(out.stdout);
        assertEquals(
          out.code,
          scenario.code,
          `${supervisor}: ${new TextDecoder().decode(out.stderr)}`,
        );
        if (scenario.stdout !== undefined) assertEquals(stdout, scenario.stdout, supervisor);
      }
    },
  });
}

Deno.test({
  name: "tini and denit alike as PID 1: 1,000 orphans reaped, none left",
  ignore: !HAS_TINI || !CAN_UNSHARE, // needs tini, and root for a PID namespace
  async fn() {
    for (const supervisor of [["tini", "--"], [...DENIT, "--"]]) {
      const result = await run([
        ...PIDNS,
        ...supervisor,
        "sh",
        "-c",
        `exec ${FIXTURES}/orphans.sh 1000`,
      ], {
        timeoutMs: 60_000,
      });
      assertEquals([result.code, result.stdout], [0, "orphans 1000\nzombies 0\n"], supervisor[0]);
    }
  },
});
