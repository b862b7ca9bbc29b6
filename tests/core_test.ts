/**
 * Core hardening against the real denit, as PID 1 and as a subreaper: early signals, SIGCHLD
 * inherited as ignored, real-time signals, leftovers out of sight, one TERM per process, the
 * stop budget, warnings when denit uses force, the open-file limit, exec as execvp does.
 */

import { assertEquals, assertMatch, assertOk, defined } from "./assert.ts";
import {
  CAN_UNSHARE,
  cleanup,
  countFds,
  DENIT,
  denitArgv,
  denitPid,
  exists,
  freePort,
  inCgroup,
  layOut,
  MODES,
  PIDNS,
  processState,
  rawHttp,
  run,
  Running,
  waitUntil,
} from "./helpers.ts";

/** A process's name, "" once it is gone. */
function readComm(pid: number): string {
  try {
    return Deno.readTextFileSync(`/proc/${pid}/comm`).trim();
  } catch {
    return ""; // Gone: no name.
  }
}

/** The children of a process (all threads). */
function childrenOf(pid: number): number[] {
  const found: number[] = [];
  try {
    for (const task of Deno.readDirSync(`/proc/${pid}/task`)) {
      const text = Deno.readTextFileSync(`/proc/${pid}/task/${task.name}/children`);
      for (const word of text.split(" ")) if (word.trim() !== "") found.push(Number(word));
    }
  } catch {
    // Gone while we looked: no children to report.
  }
  return found;
}

for (const mode of MODES) {
  Deno.test(`${mode}: SIGCHLD inherited as ignored neither hangs denit nor loses the status`, async () => {
    // perl sets SIGCHLD to SIG_IGN and execs denit: the kernel would reap every child itself.
    // denit is started without the bin/denit shell script: dash would reset SIGCHLD.
    const ignore = ["perl", "-e", '$SIG{CHLD}="IGNORE"; exec @ARGV or die'];
    const argv = mode === "pid1"
      ? [...PIDNS, ...ignore, ...DENIT, "--", "sh", "-c", "exit 7"]
      : [...ignore, ...DENIT, "-s", "--", "sh", "-c", "exit 7"];
    const result = await run(argv, { timeoutMs: 10_000 });
    assertEquals(result.code, 7, result.stderr);
  });
}

Deno.test("real-time signals are forwarded, each in turn; the child starts with them at default", async () => {
  // The mask is read from the test, of the child once it is `sleep`: a shell's own status read
  // by a process it forks can show the signals dash blocks around vfork (a flaky read).
  const plain = new Running([...DENIT, "-s", "--", "sh", "-c", "echo ready; exec sleep 30"]);
  const trapping = 'for n in 35 39 64; do trap "echo rt $n" $n; done; echo ready; ' +
    "while :; do sleep 0.01; done";
  const counter = new Running([...DENIT, "-s", "--", "sh", "-c", trapping]);
  try {
    await plain.waitFor(/^ready$/);
    const child = defined(childrenOf(plain.child.pid)[0], "the child");
    await waitUntil(() => readComm(child) === "sleep", "the child's exec of sleep");
    const status = await Deno.readTextFile(`/proc/${child}/status`);
    assertMatch(status, /^SigBlk:\s+0{16}$/m);
    assertMatch(status, /^SigIgn:\s+0{16}$/m);
    await counter.waitFor(/^ready$/);
    let from = 0;
    for (const signo of [35, 39, 64]) {
      const kill = await run(["kill", `-${signo}`, String(counter.child.pid)]);
      assertEquals(kill.code, 0, kill.stderr);
      from = await counter.waitFor(new RegExp(`^rt ${signo}$`), { from }) + 1;
    }
    Deno.kill(counter.child.pid, "SIGTERM");
    assertEquals((await counter.status()).code, 143);
  } finally {
    await plain.stop();
    await counter.stop();
  }
});

Deno.test({
  name: "an image without the C library: the launcher names the missing loader (125, one line)",
  ignore: !CAN_UNSHARE, // chroot needs root
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-nolibc-" });
    try {
      await layOut(dir);
      const result = await run(["chroot", dir, "/denit", "--", "/true"]);
      assertEquals([result.code, result.stdout], [125, ""]);
      assertMatch(
        result.stderr,
        /^denit: cannot start the runtime \/deno: its loader \/lib.*ld-linux.* is missing: the runtime needs the GNU C library \(a glibc base image such as distroless\/cc\)\n$/,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("subreaper: a descendant behind a setsid process that ignores TERM is found and killed", async () => {
  // The child exits at once; it leaves B (its own session, ignores TERM) whose child C also
  // ignores TERM. C is not denit's child until B dies: a sweep of descendants must reach it.
  const inner = `trap "" TERM; echo "b $$"; (trap "" TERM; echo "c $(sh -c 'echo $PPID')";
    : > "$1/ready"; exec sleep 60) & wait`;
  const script = `m=$(mktemp -d); setsid sh -c '${inner.replaceAll("'", `'"'"'`)}' sh "$m" &
    while [ ! -e "$m/ready" ]; do sleep 0.01; done; rm -rf "$m"; exit 3`;
  const proc = new Running([...DENIT, "-s", "--kill-after", "300ms", "--", "sh", "-c", script]);
  const pids: number[] = [];
  try {
    pids.push(Number(proc.line(await proc.waitFor(/^b \d+$/)).split(" ")[1]));
    pids.push(Number(proc.line(await proc.waitFor(/^c \d+$/)).split(" ")[1]));
    const status = await proc.status();
    assertEquals(status.code, 3, status.stderr);
    for (const pid of pids) assertOk(!exists(pid), `${pid} outlived denit`);
    assertMatch(status.stderr, /warn: SIGKILL to leftovers still running after 300ms: .*\(sleep\)/);
    assertOk(!/survived SIGKILL/.test(status.stderr), status.stderr);
  } finally {
    await proc.stop();
    cleanup(pids);
  }
});

for (const mode of MODES) {
  Deno.test(`${mode}: each leftover gets one SIGTERM, also after a TERM forwarded to the group`, async () => {
    // A worker in the child's process group counts the TERMs it gets and ignores them. The
    // child's own trap is set before the worker starts: worker-ready must mean both are set.
    const worker = `trap 'echo term' TERM; echo worker-ready; while :; do sleep 0.05; done`;
    const child = `trap 'exit 0' TERM; sh -c "${worker}" & while :; do sleep 0.05; done`;
    for (const group of [false, true]) {
      const flags = [...(group ? ["-g"] : []), "--kill-after", "500ms"];
      const proc = new Running(denitArgv(mode, [...flags, "--", "sh", "-c", child]));
      try {
        await proc.waitFor(/^worker-ready$/);
        Deno.kill(denitPid(proc, mode), "SIGTERM");
        const status = await proc.status();
        assertEquals(status.code, 0, status.stderr);
        assertEquals(
          proc.lines.filter((l) => l === "term").length,
          1,
          `-g ${group}: ${proc.lines}`,
        );
      } finally {
        await proc.stop();
      }
    }
  });

  Deno.test(`${mode}: --grace bounds the whole stop and says what it killed`, async () => {
    // Child and leftover both ignore TERM. Before: grace + kill-after (1 s + 3 s).
    const script = `(trap '' TERM; exec sleep 60) & trap '' TERM; echo ready; exec sleep 60`;
    const proc = new Running(denitArgv(mode, ["--grace", "1s", "--", "sh", "-c", script]));
    try {
      await proc.waitFor(/^ready$/);
      const started = performance.now();
      Deno.kill(denitPid(proc, mode), "SIGTERM");
      const status = await proc.status();
      const elapsed = performance.now() - started;
      assertEquals(status.code, 137, status.stderr);
      // Sooner than the grace and the kill-after it replaces (1 s + 3 s); the line says which.
      assertOk(elapsed >= 1000 && elapsed < 4000, `the stop took ${elapsed.toFixed(0)} ms`);
      assertMatch(status.stderr, /warn: grace period of 1s expired: SIGKILL to \d+ \(sleep\)/);
    } finally {
      await proc.stop();
    }
  });
}

Deno.test("the child gets the container's open files, or --nofile", async () => {
  // The runtime raised its soft limit to the hard one; the launcher recorded the container's.
  const show = ["--", "sh", "-c", "ulimit -n; ulimit -Hn"];
  const hard = (await run(["sh", "-c", "ulimit -Hn"])).stdout.trim();
  const prlimit = (soft: number) => ["prlimit", `--nofile=${soft}:${hard}`];
  const plain = await run([...prlimit(512), ...DENIT, "-s", ...show]);
  assertEquals(plain.stdout, `512\n${hard}\n`, plain.stderr);
  const max = await run([...DENIT, "-s", "--nofile", "max", ...show]);
  assertEquals(max.stdout, `${hard}\n${hard}\n`);
  const value = await run([...DENIT, "-s", "--nofile", "700", ...show]);
  assertEquals(value.stdout, `700\n${hard}\n`);
  const env = await run([...DENIT, "-s", ...show], { env: { DENIT_NOFILE: "800" } });
  assertEquals(env.stdout, `800\n${hard}\n`);
  // Above the hard limit: that limit, and a line that says so.
  const above = await run(["prlimit", "--nofile=512:900", ...DENIT, "-s", "--nofile=901", ...show]);
  assertEquals([above.code, above.stdout], [0, "900\n900\n"], above.stderr);
  assertMatch(above.stderr, /warn: --nofile 901 is above the hard limit of 900: the child gets/);
});

Deno.test("exec as execvp: no PATH, a script without #!, a missing interpreter", async () => {
  const dir = await Deno.makeTempDir();
  try {
    // PATH unset: the C library's default path (/bin:/usr/bin).
    const bare = await run(["env", "-i", ...DENIT, "-s", "--", "true"]);
    assertEquals(bare.code, 0, bare.stderr);
    await Deno.writeTextFile(`${dir}/plain`, 'echo from-sh "$1"\nexit 4\n', { mode: 0o755 });
    const plain = await run([...DENIT, "-s", `${dir}/plain`, "arg"]);
    assertEquals([plain.code, plain.stdout], [4, "from-sh arg\n"], plain.stderr);
    await Deno.writeTextFile(`${dir}/orphan`, "#!/no/such/shell -e\n", { mode: 0o755 });
    const missing = await run([...DENIT, "-s", `${dir}/orphan`]);
    assertEquals(missing.code, 127);
    assertMatch(
      missing.stderr,
      /Cannot start ".*\/orphan": its interpreter "\/no\/such\/shell" is missing\n$/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("deno run's node shim on PATH does not reach the child", async () => {
  // With no `node` on PATH, deno run prepends DENO_DIR/node_compat_bin (a `node` that is Deno).
  const dir = await Deno.makeTempDir();
  try {
    await Deno.symlink("/bin/sh", `${dir}/sh`);
    const result = await run([...DENIT, "-s", "--", "/usr/bin/env"], {
      env: { PATH: dir, DENO_DIR: `${dir}/deno-dir` },
    });
    assertEquals(result.code, 0, result.stderr);
    const lines = result.stdout.split("\n");
    assertOk(lines.includes(`PATH=${dir}`), result.stdout);
    assertOk(!result.stdout.includes("DENO_NODE_SHIM_ACTIVE"), result.stdout);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ps, top and docker top show denit, not the runtime's name", async () => {
  const proc = new Running([...DENIT, "-s", "--", "sh", "-c", "echo ready; exec sleep 30"]);
  try {
    await proc.waitFor(/^ready$/);
    assertEquals(await Deno.readTextFile(`/proc/${proc.child.pid}/comm`), "denit\n");
    // The command line starts with the launcher's path (the runtime's own arguments follow).
    const words = (await Deno.readTextFile(`/proc/${proc.child.pid}/cmdline`)).split("\0");
    assertEquals(words[0], await Deno.realPath(DENIT[0] ?? ""));
  } finally {
    await proc.stop();
  }
});

Deno.test("messages a newcomer meets: CRLF, a star no shell expanded, a typo, an option or program as command", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/crlf.sh`, "#!/bin/sh\r\necho hi\r\n", { mode: 0o755 });
    const crlf = await run([...DENIT, "-s", `${dir}/crlf.sh`]);
    assertEquals(crlf.code, 127);
    assertMatch(crlf.stderr, /its #! line ends with a carriage return \(Windows line ends, CRLF\)/);
    const star = await run([...DENIT, "copy", `${dir}/src/*`, `${dir}/dst`]);
    assertEquals(star.code, 1);
    assertMatch(
      star.stderr,
      /no such file or directory; no shell expanded "\*" here: to copy the contents of a directory, give ".*\/src\/\."\n$/,
    );
    const typo = await run([...DENIT, "--grce", "1s", "true"]);
    assertEquals(typo.code, 2);
    assertMatch(typo.stderr, /^denit: Unknown option "--grce"; did you mean --grace\?\n/);
    // docker run IMAGE --grace 1s cmd, under ENTRYPOINT ["/denit", "--"].
    const asCommand = await run([...DENIT, "-s", "--", "--grace", "1s", "true"]);
    assertEquals(asCommand.code, 127);
    assertMatch(
      asCommand.stderr,
      /Cannot start "--grace": command not found; it is an option of denit's: put options before "--", or set DENIT_GRACE in the environment/,
    );
    // docker run IMAGE init /shared, under the same ENTRYPOINT (no init on the image's PATH).
    const program = await run([...DENIT, "-s", "--", "init", "/shared"], {
      env: { PATH: dir },
    });
    assertEquals(program.code, 127);
    assertMatch(
      program.stderr,
      /Cannot start "init": command not found; "init" is a program of denit's, which comes before any "--": with an ENTRYPOINT \["\/denit", "--"\], run docker run --entrypoint \/denit IMAGE init \.\.\.\n$/,
    );
    const socket = await run([...DENIT, "-s", "--", "true"], { env: { DENIT_JOBS_SOCKET: "1" } });
    assertEquals(socket.code, 2);
    assertMatch(
      socket.stderr,
      /^denit: Invalid socket path "1": use an absolute path.*DENIT_JOBS_SOCKET/,
    );
    const control = await run([...DENIT, "-s", "--jobs-socket", "/run/a\nb", "--", "true"]);
    assertEquals(control.code, 2);
    assertMatch(
      control.stderr,
      /^denit: Invalid socket path "\/run\/a\\nb": it holds a control character, and gRPC clients cannot reach such a path \(from --jobs-socket\)\n/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** The v1 pids controller, as on this project's CI machines. */
const PIDS_V1 = (() => {
  try {
    return Deno.statSync("/sys/fs/cgroup/pids/cgroup.procs").isFile;
  } catch {
    return false; // not mounted: the test that needs it says so
  }
})();

Deno.test({
  name: "a spawn the pids limit refuses: 125 and the limit named, not 126",
  ignore: !PIDS_V1, // needs the v1 pids controller (and root)
  fn: async () => {
    // denit in a pids cgroup; the limit is raised one at a time from below until denit itself
    // starts (its threads count) but its child no longer fits.
    const cgroup = `/sys/fs/cgroup/pids/denit-pids-${crypto.randomUUID().slice(0, 8)}`;
    await Deno.mkdir(cgroup);
    try {
      let refused: { code: number; stderr: string } | null = null;
      for (let max = 4; max < 40 && refused === null; max++) {
        await Deno.writeTextFile(`${cgroup}/pids.max`, String(max));
        const result = await run([
          ...inCgroup(cgroup),
          ...DENIT,
          "-s",
          "--",
          "true",
        ]);
        if (result.code === 0) break; // room for the child too: the limit was not met
        if (/Cannot start "true"/.test(result.stderr)) refused = result;
      }
      const found = defined(refused, "a limit at which denit ran but its child did not");
      assertEquals(found.code, 125, found.stderr);
      assertMatch(
        found.stderr,
        /Cannot start "true": no new process allowed \(resource temporarily unavailable\): the limit on processes is reached \(the cgroup's pids\.max, or RLIMIT_NPROC\)\n$/,
      );
    } finally {
      await Deno.remove(cgroup);
    }
  },
});

Deno.test("tini's and dumb-init's suites: an inherited subreaper, -g without one, rewrites of what never comes", async () => {
  // A parent that made denit a subreaper before exec (prctl survives exec): no warning, and
  // orphans come to denit (the child's daemon is reaped, not left to the host's init).
  const subreaper = [
    "python3",
    "-c",
    "import ctypes, os, sys; ctypes.CDLL(None).prctl(36, 1, 0, 0, 0); os.execvp(sys.argv[1], sys.argv[1:])",
  ];
  const inherited = await run([
    ...subreaper,
    ...DENIT,
    "-w",
    "--",
    "sh",
    "-c",
    "sleep 0.1 & exit 0",
  ]);
  assertEquals(inherited.code, 0, inherited.stderr);
  assertOk(!/not a subreaper/.test(inherited.stderr), inherited.stderr);
  assertMatch(inherited.stderr, /reaped a process that was not the main child/);
  // -g where orphans do not come to denit: the child's group gets SIGTERM at its end, as
  // under dumb-init (before: nothing, and the daemon ran on).
  const dir = await Deno.makeTempDir();
  try {
    const script = `sleep 60 </dev/null >/dev/null 2>&1 & echo $! > "$1/daemon"; exit 0`;
    const grouped = await run([...DENIT, "-g", "--", "sh", "-c", script, "sh", dir]);
    assertEquals(grouped.code, 0, grouped.stderr);
    const daemon = Number(await Deno.readTextFile(`${dir}/daemon`));
    try {
      await waitUntil(() => ["", "Z"].includes(processState(daemon)), "the group's TERM", 5000);
    } finally {
      cleanup([daemon]);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  // -r FROM:TO for a signal denit never receives is refused, with the reason.
  for (
    const [from, why] of [["SYS", "crash signal"], ["CHLD", "child notification"], [
      "33",
      "the C library's own",
    ]]
  ) {
    const refused = await run([...DENIT, "-r", `${from}:TERM`, "--", "true"]);
    assertEquals(refused.code, 2, refused.stderr);
    assertMatch(
      refused.stderr,
      new RegExp(`^denit: Invalid rewrite "${from}:TERM": denit never passes \\S+ on \\(.*${why}`),
    );
  }
});

Deno.test("health clients never take the descriptors denit needs to stop the leftovers", async () => {
  // denit may hold 48 descriptors; 60 health clients that connect and say nothing would take
  // them all. At such a limit the endpoint holds fewer connections, so when the child exits the
  // sweep still reads /proc and stops the leftover, which ignores TERM (with every descriptor
  // taken it would find nothing, and the leftover would run on).
  const port = freePort();
  const script = `(trap '' TERM; echo "left $(sh -c 'echo $PPID')"; exec sleep 60) &
    trap 'exit 0' USR1; echo ready; while :; do sleep 0.05; done`;
  const proc = new Running([
    ...["prlimit", "--nofile=48:48"],
    ...DENIT,
    "-s",
    "--kill-after",
    "300ms",
    "--health-addr",
    `127.0.0.1:${port}`,
    "--",
    "sh",
    "-c",
    script,
  ]);
  const clients: Deno.TcpConn[] = [];
  let left = 0;
  try {
    left = Number(proc.line(await proc.waitFor(/^left \d+$/)).split(" ")[1]);
    await proc.waitFor(/^ready$/);
    for (let i = 0; i < 60; i++) clients.push(await Deno.connect({ hostname: "127.0.0.1", port }));
    // Accepted only after every client before it: once it is answered, the flood is in.
    const answer = await rawHttp(port, "GET /healthz HTTP/1.1\r\nHost: denit\r\n\r\n");
    assertMatch(answer, /^HTTP\/1\.1 200 /);
    assertOk(countFds(proc.child.pid) < 48, "denit kept descriptors of its own");
    proc.kill("SIGUSR1");
    const status = await proc.status();
    assertEquals(status.code, 0, status.stderr);
    assertOk(!exists(left) || processState(left) === "Z", `the leftover ran on: ${status.stderr}`);
    assertMatch(status.stderr, /SIGKILL to leftovers still running after 300ms: \d+ \(sleep\)/);
  } finally {
    for (const client of clients) client.close();
    await proc.stop();
    cleanup([left]);
  }
});
