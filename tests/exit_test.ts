/** Exit status passthrough, exec errors and usage errors, against the real denit. */

import { assertEquals, assertMatch } from "./assert.ts";
import { DENIT, denitArgv, MODES, run } from "./helpers.ts";

const CODES = [0, 1, 42, 255];
// Every signal whose default action ends the process (signal(7)); SIGKILL included.
// Numbers, not names: dash's kill does not know every name (SIGSTKFLT).
const DEATHS = [
  1,
  2,
  3,
  4,
  5,
  6,
  7,
  8,
  9,
  10,
  11,
  12,
  13,
  14,
  15,
  16,
  24,
  25,
  26,
  27,
  29,
  30,
  31,
  34,
];

for (const mode of MODES) {
  Deno.test(`${mode}: exit codes pass through unchanged`, async () => {
    const results = await Promise.all(
      CODES.map((code) => run(denitArgv(mode, ["--", "sh", "-c", `exit ${code}`]))),
    );
    assertEquals(results.map((r) => r.code), CODES);
    for (const result of results) assertEquals(result.stderr, "");
  });

  Deno.test(`${mode}: death by signal N exits 128+N`, async () => {
    const results = await Promise.all(DEATHS.map((signo) =>
      // ulimit -c 0: core-dumping signals must not leave core files behind.
      run(denitArgv(mode, ["--", "sh", "-c", `ulimit -c 0; kill -${signo} $$; sleep 5`]))
    ));
    assertEquals(results.map((r) => r.code), DEATHS.map((signo) => 128 + signo));
  });

  Deno.test(`${mode}: --remap-exit and DENIT_REMAP_EXIT map codes to 0`, async () => {
    const flag = await run(denitArgv(mode, ["-e", "3", "-e", "143", "sh", "-c", "kill $$"]));
    assertEquals(flag.code, 0);
    const env = await run(denitArgv(mode, ["sh", "-c", "exit 3"]), {
      env: { DENIT_REMAP_EXIT: "4,3" },
    });
    assertEquals(env.code, 0);
    const other = await run(denitArgv(mode, ["-e", "3", "sh", "-c", "exit 4"]));
    assertEquals(other.code, 4);
  });
}

Deno.test("command not found exits 127 with one line naming it", async () => {
  const result = await run([...DENIT, "-s", "--", "no-such-command-xyz", "arg"]);
  assertEquals(result.code, 127);
  assertMatch(
    result.stderr,
    /^denit\[\d+\] error: Cannot start "no-such-command-xyz": command not found\n$/,
  );
  const path = await run([...DENIT, "-s", "/nonexistent/tool"]);
  assertEquals(path.code, 127);
  assertMatch(path.stderr, /"\/nonexistent\/tool": no such file\n$/);
});

Deno.test("a file that is not executable exits 126 with one line naming it", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/noexec-tool`, "#!/bin/sh\necho hi\n", { mode: 0o644 });
    const direct = await run([...DENIT, "-s", `${dir}/noexec-tool`]);
    assertEquals(direct.code, 126);
    assertMatch(direct.stderr, /^denit\[\d+\] error: Cannot start ".*\/noexec-tool": .+\n$/);
    const onPath = await run([...DENIT, "-s", "noexec-tool"], {
      env: { PATH: `${dir}:/usr/bin:/bin` },
    });
    assertEquals(onPath.code, 126);
    assertMatch(onPath.stderr, /permission denied/);
    const directory = await run([...DENIT, "-s", dir]);
    assertEquals(directory.code, 126);
    assertMatch(directory.stderr, /: not a regular file\n$/);
    // A link is followed, as execve(2) does; a dangling one names nothing.
    await Deno.symlink("/bin/true", `${dir}/linked-true`);
    assertEquals((await run([...DENIT, "-s", `${dir}/linked-true`])).code, 0);
    await Deno.symlink(`${dir}/nowhere`, `${dir}/dangling`);
    const dangling = await run([...DENIT, "-s", `${dir}/dangling`]);
    assertEquals(dangling.code, 127);
    assertMatch(dangling.stderr, /: no such file\n$/);
    await Deno.writeTextFile(`${dir}/noshell`, "#!/no/such/interpreter\n", { mode: 0o755 });
    const interpreter = await run([...DENIT, "-s", `${dir}/noshell`]);
    assertEquals(interpreter.code, 127);
    await Deno.writeFile(`${dir}/garbage`, new Uint8Array([0x7f, 0x45, 0x4c, 0x46, 1, 2]), {
      mode: 0o755,
    });
    const format = await run([...DENIT, "-s", `${dir}/garbage`]);
    assertEquals(format.code, 126);
    assertMatch(format.stderr, /exec format error/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

const BAD_INPUTS: Array<[string[], Record<string, string>, RegExp]> = [
  [[], {}, /No command given/],
  [["--bogus", "true"], {}, /Unknown option "--bogus"/],
  [["-x", "true"], {}, /Unknown option "-x"/],
  [["--grace"], {}, /Option "--grace" needs a value/],
  [["--grace", "soon", "true"], {}, /Invalid duration "soon"/],
  [["--kill-after", "-1", "true"], {}, /Invalid duration "-1"/],
  [["-r", "TERM", "true"], {}, /Invalid rewrite "TERM": use FROM:TO/],
  [["-r", "TERM:NOPE", "true"], {}, /Invalid signal "NOPE"/],
  [["-e", "256", "true"], {}, /Invalid exit code "256"/],
  [["-p", "99", "true"], {}, /Invalid signal "99"/],
  [["--health-addr", "nohost", "true"], {}, /Invalid address "nohost"/],
  [["--group=1", "true"], {}, /Option "--group" takes no value/],
  [
    ["true"],
    { DENIT_GROUP: "maybe" },
    /Invalid value "maybe": use 1\/true\/yes\/on .*\(from DENIT_GROUP\)$/,
  ],
  [["true"], { DENIT_GRACE: "x" }, /Invalid duration "x": .* \(from DENIT_GRACE\)$/],
  [["true"], { DENIT_LOG_LEVEL: "loud" }, /Invalid log level "loud"/],
];

Deno.test("usage errors exit 2 with one line, the usage line and a --help pointer", async () => {
  for (const [args, env, message] of BAD_INPUTS) {
    const result = await run([...DENIT, ...args], { env });
    assertEquals(result.code, 2, `denit ${args.join(" ")}`);
    assertEquals(result.stdout, "");
    const lines = result.stderr.trimEnd().split("\n");
    assertEquals(lines.length, 3, result.stderr);
    assertMatch(lines[0] ?? "", message);
    assertMatch(lines[0] ?? "", /^denit: /);
    assertEquals(lines[1], "Usage: denit [OPTIONS] [--] COMMAND [ARGS...]");
    assertEquals(lines[2], "Try 'denit --help' for more information.");
  }
});

Deno.test("configuration errors follow --log-format json and escape control characters", async () => {
  for (const [args, env, message] of BAD_INPUTS) {
    const result = await run([...DENIT, ...args], { env: { ...env, DENIT_LOG_FORMAT: "json" } });
    assertEquals([result.code, result.stdout], [2, ""], `denit ${args.join(" ")}`);
    const lines = result.stderr.trimEnd().split("\n");
    assertEquals(lines.length, 1, result.stderr);
    const line = JSON.parse(lines[0] ?? "");
    assertEquals([line.level, line.logger], ["error", "denit"]);
    assertMatch(line.message, message);
  }
  const odd = "x\ny\x1b[1m";
  const text = await run([...DENIT, "--user", odd, "--", "true"]);
  assertEquals([text.code, text.stderr], [
    2,
    'denit: Unknown user "x\\ny\\x1b[1m": not in /etc/passwd\n',
  ]);
  const json = await run([...DENIT, "--log-format", "json", "--user", odd, "--", "true"]);
  assertEquals(JSON.parse(json.stderr).message, `Unknown user "${odd}": not in /etc/passwd`);
});

Deno.test("--help and --version exit 0 on stdout", async () => {
  const help = await run([...DENIT, "--help"]);
  assertEquals(help.code, 0);
  assertMatch(help.stdout, /^Usage: denit/);
  const version = await run([...DENIT, "--version"]);
  assertEquals(version.code, 0);
  assertMatch(version.stdout, /^denit \d+\.\d+\.\d+ \(deno \d+\.\d+\.\d+\)\n$/);
});
