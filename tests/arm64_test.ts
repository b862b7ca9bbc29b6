/**
 * The aarch64 lane: the registry's arm64 runtime runs denit's bundle under qemu-user on this
 * x86_64 machine. The lane's form is the launcher (native), the runtime beside it (a stand-in,
 * fixtures/qemu_runtime.c, that runs the aarch64 runtime under qemu-aarch64-static) and the same
 * bundles: everything denit does through FFI and the kernel runs on aarch64, with no
 * binfmt_misc registration. The process-level tests below are the suite's own, run again with
 * LANE_DENIT naming the lane's launcher; the unit tests of the C structs and wait statuses
 * run on the aarch64 runtime itself. Then the arm64 image (`make image-arm64`: the launcher
 * cross-built) under Docker, where binfmt_misc can run it.
 */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import {
  denitPid,
  ECHO,
  freePort,
  PIDNS,
  rawHttp,
  ROOT,
  run,
  Running,
  staticFixture,
} from "./helpers.ts";

const QEMU = "qemu-aarch64-static";
const PREFIX = "/usr/aarch64-linux-gnu";
const RUNTIME = `${ROOT}dist/arm64/deno`;

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

/** Why the lane cannot run here, or null. */
const MISSING = (() => {
  const onPath = (name: string) =>
    (Deno.env.get("PATH") ?? "").split(":").some((dir) => exists(`${dir}/${name}`));
  if (Deno.build.arch !== "x86_64") return "the lane emulates aarch64 on x86_64";
  if (!onPath(QEMU)) return `${QEMU} is not installed (qemu-user-static)`;
  if (!exists(`${PREFIX}/lib/ld-linux-aarch64.so.1`)) return "libc6-arm64-cross is not installed";
  if (!exists(`${PREFIX}/lib/libgcc_s.so.1`)) return "libgcc-s1-arm64-cross is not installed";
  if (!exists(RUNTIME)) return `${RUNTIME} is missing (make bundle-arm64)`;
  return null;
})();
if (MISSING !== null) {
  // deno-lint-ignore no-console -- a skipped lane must say why
  console.warn(`SKIP the aarch64 lane: ${MISSING}`);
}

/** The lane's form in `dir`: the launcher, the stand-in runtime, the aarch64 one, the bundles. */
async function layOutLane(dir: string): Promise<string> {
  await Deno.copyFile(`${ROOT}dist/denit`, `${dir}/denit`);
  await Deno.copyFile(staticFixture("qemu_runtime"), `${dir}/deno`);
  await Deno.link(RUNTIME, `${dir}/deno-arm64`).catch(() =>
    Deno.copyFile(RUNTIME, `${dir}/deno-arm64`)
  );
  for (const bundle of ["denit.js", "denit-features.js", "denit-jobs.js"]) {
    await Deno.copyFile(`${ROOT}dist/${bundle}`, `${dir}/${bundle}`);
  }
  for (const file of ["denit", "deno", "deno-arm64"]) await Deno.chmod(`${dir}/${file}`, 0o755);
  // Readable by all: the --user test's child runs as nobody.
  await Deno.chmod(dir, 0o755);
  return `${dir}/denit`;
}

/** The suite's tests that the lane runs again, by file: what touches FFI and the kernel. */
const AGAIN: Record<string, readonly string[]> = {
  "signals_test.ts": [
    "pid1: every forwarded signal reaches the child, in order",
    "pid1: --group reaches a grandchild in the child's process group",
    "pid1: --grace SIGKILLs a child that ignores SIGTERM (exit 137)",
  ],
  "reap_test.ts": [
    "pid1: 2,000 orphans are reaped, zero zombies left",
    "pid1: leftovers get SIGTERM, then SIGKILL after --kill-after",
    "pid1: leftovers of a stopped child get SIGKILL when --grace ends, and the line says so",
  ],
  // 128+N: the --grace test's 137 (30 runtimes at once, as the 128+N test starts, outlast its
  // bound under emulation).
  "exit_test.ts": ["pid1: exit codes pass through unchanged"],
  "lifecycle_test.ts": [
    "pid1: --user nobody: all ids changed, no way back, HOME set, denit still root",
  ],
  "copy_test.ts": [
    "SRC/. copies contents (hidden files too) with modes, times and links",
    "names and link targets that are not UTF-8 are copied byte for byte",
    "hard links stay links within one copy",
    "extended attributes and file capabilities are copied, or warned about",
    "holes stay holes: a 1 GiB sparse file fits a 64 MiB tmpfs",
  ],
};

/** A --filter that matches exactly these names. */
function exactly(names: readonly string[]): string {
  const escaped = names.map((name) => name.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&"));
  return `/^(${escaped.join("|")})$/`;
}

/** Runs `deno test` on `files` with `filter`; returns how many passed, failing on any failure. */
async function testRun(
  runtime: readonly string[],
  files: readonly string[],
  filter: string | null,
  env: Record<string, string>,
): Promise<number> {
  const args = [
    "test",
    "--allow-all",
    "--no-prompt",
    ...(filter === null ? [] : ["--filter", filter]),
  ];
  const result = await new Deno.Command(runtime[0] ?? "", {
    args: [...runtime.slice(1), ...args, ...files.map((file) => `${ROOT}tests/${file}`)],
    env: { ...env, NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const out = new TextDecoder().decode(result.stdout) + new TextDecoder().decode(result.stderr);
  assertOk(result.success, out);
  const passed = /ok \| (\d+) passed \| 0 failed/.exec(out);
  assertOk(passed !== null, out);
  return Number(passed[1]);
}

Deno.test({
  name: "arm64: the lane's runtime is the aarch64 build, run under qemu-user",
  ignore: MISSING !== null,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-arm64-" });
    try {
      await layOutLane(dir);
      const result = await run([`${dir}/deno`, "eval", "console.log(Deno.build.arch)"]);
      assertEquals([result.code, result.stdout], [0, "aarch64\n"], result.stderr);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "arm64: the suite's signal, reaping, exit, --user, health and copy tests pass on aarch64",
  ignore: MISSING !== null,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-arm64-" });
    try {
      const denit = await layOutLane(dir);
      const names = Object.values(AGAIN).flat();
      const passed = await testRun(
        [`${ROOT}dist/deno`],
        Object.keys(AGAIN),
        exactly(names),
        // Under emulation a start takes seconds: every wait of the suite's helpers is longer.
        { LANE_DENIT: denit, PATH: Deno.env.get("PATH") ?? "", TEST_PATIENCE: "4" },
      );
      assertEquals(passed, names.length, "a name in AGAIN matched no test");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  // The suite's health tests run denit as a subreaper, which qemu-user cannot make (EINVAL).
  name: "arm64: /status as PID 1 counts the reaped orphans and the forwarded signal",
  ignore: MISSING !== null,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-arm64-" });
    const port = freePort();
    const child = "(true &); (true &); trap 'echo usr1' USR1; echo ready; " +
      "while :; do sleep 0.05; done";
    const proc = new Running([
      ...PIDNS,
      await layOutLane(dir),
      ...["--health-addr", `127.0.0.1:${port}`, "--", "sh", "-c", child],
    ]);
    try {
      await proc.waitFor(/^ready$/, { timeoutMs: 30_000 });
      const status = async () => {
        const text = await rawHttp(port, "GET /status HTTP/1.0\r\n\r\n", { timeoutMs: 5000 });
        return JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4));
      };
      for (const by = Date.now() + 10_000; (await status()).zombiesReaped < 2;) {
        assertOk(Date.now() < by, "the two orphans were not reaped");
      }
      const pid = denitPid(proc, "pid1");
      Deno.kill(pid, "SIGUSR1");
      await proc.waitFor(/^usr1$/);
      const after = await status();
      assertEquals([after.state, after.signalsForwarded], ["running", { SIGUSR1: 1 }]);
      assertEquals(after.supervisor.pid, 1);
      // A stop: TERM to PID 1, forwarded; the shell's death by it comes out as 143.
      Deno.kill(pid, "SIGTERM");
      assertEquals((await proc.status(30_000)).code, 143);
    } finally {
      await proc.stop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "arm64: wait statuses, the C structs and the symbol table decode right on aarch64",
  ignore: MISSING !== null,
  fn: async () => {
    const passed = await testRun(
      [QEMU, "-L", PREFIX, RUNTIME],
      ["process_test.ts", "layout_test.ts", "symbols_test.ts"],
      null,
      {
        PATH: Deno.env.get("PATH") ?? "",
        DENO_DIR: Deno.env.get("DENO_DIR") ?? "",
        LANE_EMULATED: "qemu-user",
      },
    );
    assertOk(passed > 0);
  },
});

/** Why the arm64 image cannot run here, or null. */
const IMAGE_MISSING = (() => {
  if (MISSING !== null) return MISSING;
  if (!exists(`${ROOT}dist/arm64/rootfs/denit`)) return "no dist/arm64/rootfs (make rootfs-arm64)";
  const docker = new Deno.Command("docker", { args: ["info"], stdout: "null", stderr: "null" });
  try {
    if (!docker.outputSync().success) return "Docker is not running";
  } catch {
    return "Docker is not installed";
  }
  return null;
})();

/**
 * binfmt_misc with qemu-aarch64 registered with the F flag (the interpreter opened at
 * registration, so that it works inside a container's root); registers it if it can.
 */
function binfmtReady(): string | null {
  const entry = "/proc/sys/fs/binfmt_misc/qemu-aarch64";
  if (!exists("/proc/sys/fs/binfmt_misc/register")) {
    new Deno.Command("mount", {
      args: ["-t", "binfmt_misc", "binfmt_misc", "/proc/sys/fs/binfmt_misc"],
      stderr: "null",
    }).outputSync();
  }
  if (!exists(entry)) {
    try {
      new Deno.Command("update-binfmts", { args: ["--enable", "qemu-aarch64"], stderr: "null" })
        .outputSync();
    } catch {
      return "update-binfmts is not installed (binfmt-support)";
    }
  }
  if (!exists(entry)) return "qemu-aarch64 cannot be registered with binfmt_misc here";
  const flags = /^flags: (.*)$/m.exec(Deno.readTextFileSync(entry))?.[1] ?? "";
  return flags.includes("F") ? null : "qemu-aarch64 is registered without the F flag";
}

Deno.test({
  name:
    "arm64: the arm64 image runs a command as PID 1, forwards docker stop, and denit init copies from it",
  ignore: IMAGE_MISSING !== null,
  fn: async () => {
    const why = binfmtReady();
    if (why !== null) {
      // deno-lint-ignore no-console -- a skipped check must say why
      console.warn(`SKIP the arm64 image under Docker: ${why}`);
      return;
    }
    const tag = `denit-arm64-test:${crypto.randomUUID().slice(0, 8)}`;
    const dir = await Deno.makeTempDir({ prefix: "denit-arm64-image-" });
    const name = `denit-arm64-${crypto.randomUUID().slice(0, 8)}`;
    try {
      const built = await run([
        ...["docker", "build", "-q", "--platform", "linux/arm64", "-t", tag],
        ...["-f", `${ROOT}launch/rootfs.Dockerfile`, `${ROOT}dist/arm64/rootfs`],
      ], { env: { PATH: Deno.env.get("PATH") ?? "" }, timeoutMs: 120_000 });
      assertEquals(built.code, 0, built.stderr);
      const arch = await run(["docker", "image", "inspect", "-f", "{{.Architecture}}", tag]);
      assertEquals(arch.stdout.trim(), "arm64");
      // A command (a static x86_64 fixture, which the kernel runs as it is) as denit's child;
      // docker stop: TERM to PID 1, forwarded; the child's own code (0) comes out.
      await Deno.copyFile(ECHO[0] ?? "", `${dir}/echo`);
      const docker = ["docker", "run", "--rm", "--network", "none", "--platform", "linux/arm64"];
      const started = new Deno.Command("docker", {
        args: [...docker.slice(1), "--name", name, "-v", `${dir}:/test`, tag, "/test/echo"],
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      const reader = started.stdout.pipeThrough(new TextDecoderStream()).getReader();
      let seen = "";
      while (!seen.includes("\n")) {
        const { value, done } = await reader.read();
        if (done) break;
        seen += value;
      }
      assertMatch(seen, /^ready \d+ \d+\n/);
      const stop = await run(["docker", "stop", "-t", "30", name], { timeoutMs: 60_000 });
      assertEquals(stop.code, 0, stop.stderr);
      for (let part = await reader.read(); !part.done; part = await reader.read()) {
        seen += part.value;
      }
      assertMatch(seen, /\nSIGTERM\n$/);
      const stderr = new Response(started.stderr).text();
      assertEquals((await started.status).code, 0, await stderr);
      // denit init from the image into a volume: the arm64 form, whole.
      const init = await run([
        ...docker,
        ...["--entrypoint", "/denit", "-v", `${dir}:/shared`, tag, "init", "/shared/denit"],
      ], { timeoutMs: 60_000 });
      assertEquals(init.code, 0, init.stderr);
      const head = (await Deno.readFile(`${dir}/denit/denit`)).subarray(0, 20);
      assertEquals(new DataView(head.buffer, head.byteOffset).getUint16(18, true), 183, "aarch64");
      assertOk(exists(`${dir}/denit/deno`) && exists(`${dir}/denit/denit.js`));
    } finally {
      await run(["docker", "rm", "-f", name]);
      await run(["docker", "rmi", "-f", tag]);
      await Deno.remove(dir, { recursive: true });
    }
  },
});
