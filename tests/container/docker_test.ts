/**
 * denit under real Docker (Debian's docker.io, dockerd started by .ci/run), in the image
 * `make image` builds from `make rootfs` (no registry, no shell): each test beside its
 * counterpart under `docker run --init` (Docker's own tini) where there is one. An engine that
 * cannot run here fails the tests with the reason; they are skipped (with the reason) only
 * without root.
 */

import { assertEquals, assertMatch, assertOk } from "../assert.ts";
import { run, waitUntil } from "../helpers.ts";
import {
  call,
  client,
  finished,
  type Job,
  type JobsClient,
  output,
  outputMatches,
} from "../jobs_client.ts";
import {
  CHILD,
  containerName,
  ECHO,
  engine,
  engineProblem,
  exitState,
  GLIBC_IMAGE,
  IMAGE,
  images,
  logsMatch,
  must,
  remove,
  TEST_IMAGE,
} from "./engines.ts";

const PROBLEM = Deno.uid() === 0 ? await engineProblem("docker") : null;
if (Deno.uid() !== 0) {
  // deno-lint-ignore no-console -- a skipped test must say why
  console.warn("SKIP docker tests: they need root (dockerd)");
}

function dockerTest(name: string, fn: () => Promise<void>): void {
  Deno.test({
    name: `docker: ${name}`,
    ignore: Deno.uid() !== 0,
    fn: async () => {
      if (PROBLEM !== null) throw new Error(PROBLEM);
      await images("docker");
      await fn();
    },
  });
}

/** `docker run` arguments for `child` under denit (the image's entrypoint) or Docker's --init. */
function under(init: boolean, image: string, child: readonly string[]): string[] {
  const [program = "", ...rest] = child;
  return init ? ["--init", "--entrypoint", program, image, ...rest] : [image, ...child];
}

/** `docker run` of a detached container named `name`, without a network: the image follows. */
function detached(name: string): string[] {
  return ["run", "-d", "--name", name, "--network", "none"];
}

const SUPERVISORS = [["denit", false], ["docker run --init", true]] as const;

dockerTest("exit codes and 128+N pass through, as under --init", async () => {
  for (const [who, init] of SUPERVISORS) {
    for (const [args, code] of [[["exit", "3"], 3], [["die", "SIGUSR2"], 140]] as const) {
      const result = await engine("docker", [
        "run",
        "--rm",
        "--network",
        "none",
        ...under(init, TEST_IMAGE, [...CHILD, ...args]),
      ]);
      assertEquals(result.code, code, `${who}: ${result.stderr}`);
    }
  }
});

dockerTest(
  "docker run -d then docker stop at once: 143 in well under a second, as --init",
  async () => {
    // The stop lands while the runtime still boots (before any listener of denit's exists):
    // denit's launcher kept it blocked, so it waits instead of being dropped (PID 1) and the
    // child gets it. Without the launcher this was 10 s and 137 (Docker's SIGKILL).
    const sleeper = ["/deno", "eval", "setInterval(() => {}, 1e9)"];
    for (const [who, init] of SUPERVISORS) {
      for (let i = 0; i < 3; i++) {
        const name = containerName("stop");
        try {
          await must("docker", [
            ...detached(name),
            ...under(init, TEST_IMAGE, sleeper),
          ]);
          const started = performance.now();
          await must("docker", ["stop", "-t", "10", name]);
          const took = performance.now() - started;
          const state = await exitState("docker", name);
          assertEquals(state.code, 143, `${who}, run ${i}`);
          assertOk(took < 2000, `${who}: docker stop took ${took.toFixed(0)} ms`);
        } finally {
          await remove("docker", [name]);
        }
      }
    }
  },
);

dockerTest(
  "a child that ignores TERM: --grace ends it before docker stop -t does, --init waits",
  async () => {
    const took: Record<string, number> = {};
    for (const [who, init] of SUPERVISORS) {
      const name = containerName("grace");
      try {
        await must("docker", [
          ...detached(name),
          "-e",
          "DENIT_GRACE=1s",
          ...under(init, TEST_IMAGE, [...CHILD, "ignore-term"]),
        ]);
        await logsMatch("docker", name, /^ready$/m);
        const started = performance.now();
        await must("docker", ["stop", "-t", "5", name]);
        took[who] = performance.now() - started;
        assertEquals((await exitState("docker", name)).code, 137, who);
        assertMatch(await logsMatch("docker", name, /term ignored/), /term ignored/);
      } finally {
        await remove("docker", [name]);
      }
    }
    assertOk((took.denit ?? 0) >= 1000 && (took.denit ?? 0) < 3500, `denit: ${took.denit} ms`);
    assertOk((took["docker run --init"] ?? 0) >= 5000, `--init: ${took["docker run --init"]} ms`);
  },
);

dockerTest(
  "docker kill -s HUP, INT, QUIT, USR1, WINCH reach the child, as under --init",
  async () => {
    for (const [who, init] of SUPERVISORS) {
      const name = containerName("kill");
      try {
        await must("docker", [
          ...detached(name),
          ...under(init, TEST_IMAGE, [...ECHO, "SIGUSR2", "0"]),
        ]);
        await logsMatch("docker", name, /^ready /m);
        for (const signal of ["HUP", "INT", "QUIT", "USR1", "WINCH"]) {
          await must("docker", ["kill", "-s", signal, name]);
          await logsMatch("docker", name, new RegExp(`^SIG${signal}$`, "m"));
        }
        await must("docker", ["kill", "-s", "USR2", name]);
        await must("docker", ["wait", name]);
        assertEquals((await exitState("docker", name)).code, 0, who);
      } finally {
        await remove("docker", [name]);
      }
    }
  },
);

/** Runs `docker run -it ...` on a pseudo-terminal (script(1)) and presses Ctrl-C at "ready". */
async function ctrlC(args: readonly string[]): Promise<{ code: number; seen: string }> {
  const quoted = args.map((word) => `'${word.replaceAll("'", `'"'"'`)}'`).join(" ");
  const proc = new Deno.Command("script", {
    args: ["-qfec", `docker run -it --rm --network none ${quoted}`, "/dev/null"],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => proc.kill("SIGKILL"), 30_000);
  const writer = proc.stdin.getWriter();
  const decoder = new TextDecoder();
  let seen = "";
  try {
    for await (const chunk of proc.stdout) {
      seen += decoder.decode(chunk, { stream: true });
      if (/ready \d+/.test(seen) && !seen.includes("<ctrl-c>")) {
        await writer.write(new Uint8Array([0x03]));
        seen += "<ctrl-c>";
      }
    }
    return { code: (await proc.status).code, seen };
  } finally {
    clearTimeout(timer);
    await writer.close().catch(() => {/* script is gone: nothing to flush */});
    await proc.stderr.cancel();
  }
}

dockerTest(
  "docker run -it: Ctrl-C through the terminal reaches the child (130), as --init",
  async () => {
    for (const [who, init] of SUPERVISORS) {
      const { code, seen } = await ctrlC(under(init, TEST_IMAGE, [...ECHO, "SIGINT", "130"]));
      assertEquals(code, 130, `${who}: ${seen}`);
      assertMatch(seen, /SIGINT/);
    }
  },
);

dockerTest(
  "--read-only --user 65532 with a terminal: the child runs, denit adds nothing",
  async () => {
    const outputs: string[] = [];
    for (const [who, init] of SUPERVISORS) {
      const result = await engine("docker", [
        "run",
        "--rm",
        "-t",
        "--read-only",
        "--user",
        "65532",
        "--network",
        "none",
        ...under(init, TEST_IMAGE, [...CHILD, "whoami"]),
      ]);
      assertEquals(result.code, 0, `${who}: ${result.stdout}`);
      const text = result.stdout.replaceAll("\r", "");
      assertMatch(text, /^uid 65532 gid 65532$/m, who);
      assertMatch(text, /^rootfs-writable false$/m, who);
      // The child's own cache lines (from its threads, in no fixed order) are counted; every
      // other line must match exactly.
      const lines = text.split("\n").filter((line) => line !== "");
      const cache = lines.filter((line) => /cache/.test(line)).length;
      outputs.push(`${cache} cache lines; ${lines.filter((l) => !/cache/.test(l)).join("|")}`);
    }
    // What the child printed and nothing more (the child, a Deno program, says itself that it
    // has no cache on a read-only root): before, denit's runtime added three such lines.
    assertEquals(outputs[0], outputs[1]);
  },
);

dockerTest(
  "--memory: the child the OOM killer ends is named (cause=oom, 137, OOMKilled)",
  async () => {
    for (const [who, init] of SUPERVISORS) {
      const name = containerName("oom");
      try {
        await must("docker", [
          ...detached(name),
          "--memory",
          "64m",
          "--memory-swap",
          "64m",
          ...under(init, TEST_IMAGE, ["/hog"]),
        ]);
        await must("docker", ["wait", name]);
        const state = await exitState("docker", name);
        assertEquals(state, { code: 137, oomKilled: true }, who);
        if (!init) {
          const logs = await logsMatch("docker", name, /cause=oom/);
          assertMatch(
            logs,
            /the child was killed by SIGKILL: the kernel's OOM killer \(memory limit 64 MiB\) cause=oom/,
          );
        }
      } finally {
        await remove("docker", [name]);
      }
    }
  },
);

dockerTest(
  "the init-container flow through a named volume: a glibc-only image runs denit from it",
  async () => {
    const volume = containerName("volume");
    await must("docker", ["volume", "create", volume]);
    try {
      // The init container: `command: ["/denit", "init", "/shared"]` of the Kubernetes examples.
      const init = await engine("docker", [
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        `${volume}:/shared`,
        "--entrypoint",
        "/denit",
        IMAGE,
        "init",
        "/shared",
      ]);
      assertEquals(init.code, 0, init.stderr);
      assertEquals(init.stdout, 'entrypoint: ["/shared/denit","--"]\n');
      // The main container: no shell, no Deno, no denit of its own; PID 1 is the copied denit.
      const app = await engine("docker", [
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        `${volume}:/shared:ro`,
        "--entrypoint",
        "/shared/denit",
        GLIBC_IMAGE,
        "--",
        "/shared/deno",
        "eval",
        "console.log('pid', Deno.pid, Deno.readTextFileSync('/proc/1/comm').trim()); Deno.exit(7)",
      ]);
      assertEquals(app.code, 7, app.stderr);
      assertMatch(app.stdout, /^pid \d+ denit$/m);
    } finally {
      await engine("docker", ["volume", "rm", "-f", volume]);
    }
  },
);

dockerTest(
  "the job service through docker exec -i /denit bridge: GitLab Step Runner's transport",
  async () => {
    // A host socket whose every connection is `docker exec -i CONTAINER /denit bridge` (socat),
    // and a gRPC client on it: Run, Follow, FollowIO, Cancel and List, then a reconnect after
    // the exec carrying a stream was killed.
    const name = containerName("jobs");
    const dir = await Deno.makeTempDir({ prefix: "denit-bridge-" });
    const socket = `${dir}/jobs.sock`;
    let relay: Deno.ChildProcess | null = null;
    let c: JobsClient | null = null;
    try {
      await must("docker", [
        ...detached(name),
        "-e",
        "DENIT_JOBS_SOCKET=/run/denit/jobs.sock",
        TEST_IMAGE,
        ...CHILD,
        "ignore-term",
      ]);
      await logsMatch("docker", name, /^ready$/m);
      relay = new Deno.Command("socat", {
        args: [`UNIX-LISTEN:${socket},fork`, `EXEC:docker exec -i ${name} /denit bridge`],
        stdout: "null",
        stderr: "null",
      }).spawn();
      await waitUntil(() => {
        try {
          return Deno.statSync(socket).isSocket === true;
        } catch {
          return false; // socat has not bound it yet
        }
      }, "socat's socket");
      c = client(socket);
      const client1 = c;
      await call<Job>((cb) => client1.Run({ id: "exit3", argv: [...CHILD, "exit", "3"] }, cb));
      const done = await finished(client1, "exit3");
      assertEquals([done.status, done.exitCode], ["FAILED", 3]);
      await call<Job>((cb) => client1.Run({ id: "who", argv: [...CHILD, "whoami"] }, cb));
      await finished(client1, "who");
      assertMatch((await output(client1, "who")).out, /^uid 0 gid 0\n/);
      // A stream whose exec is killed: the client sees the connection end, reconnects, and the
      // job is there, untouched, and can be cancelled.
      await call<Job>((cb) => client1.Run({ id: "stuck", argv: [...CHILD, "ignore-term"] }, cb));
      await outputMatches(client1, "stuck", /^ready$/m);
      const stream = client1.Follow({ id: "stuck" });
      const ended = new Promise<void>((resolve) => {
        stream.on("error", () => resolve());
        stream.on("end", () => resolve());
      });
      const execs = (await run(["pgrep", "-f", `^docker exec -i ${name} /denit bridge`])).stdout
        .trim().split("\n").filter((pid) => pid !== "").map(Number);
      assertOk(execs.length > 0, "no docker exec carries the connection");
      for (const pid of execs) Deno.kill(pid, "SIGKILL");
      await ended;
      client1.close();
      c = client(socket);
      const client2 = c;
      const { jobs } = await call<{ jobs: Job[] }>((cb) => client2.List({}, cb));
      assertEquals(jobs.map((j) => [j.id, j.status]), [
        ["exit3", "FAILED"],
        ["who", "SUCCEEDED"],
        ["stuck", "RUNNING"],
      ]);
      const cancelled = await call<Job>((cb) => client2.Cancel({ id: "stuck", graceMs: 300 }, cb));
      assertEquals([cancelled.status, cancelled.signal], ["CANCELLED", "SIGKILL"]);
    } finally {
      c?.close();
      relay?.kill("SIGTERM");
      await relay?.status;
      await remove("docker", [name]);
      await Deno.remove(dir, { recursive: true });
    }
  },
);

/** Polls `docker inspect` until the container's health status is `status`; the last probe's output. */
async function healthIs(container: string, status: string): Promise<string> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const text = await must("docker", ["inspect", "-f", "{{json .State.Health}}", container]);
    const health = JSON.parse(text) as { Status: string; Log: Array<{ Output: string }> };
    if (health.Status === status) return health.Log.at(-1)?.Output ?? "";
    if (Date.now() > deadline) throw new Error(`${container}: not ${status} in 30 s: ${text}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Runs `fn` with a container of an image built FROM the test image with `lines` added (a
 * HEALTHCHECK); removes both at the end.
 */
async function withHealthImage(
  what: string,
  lines: string,
  fn: (image: string, name: string) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "denit-health-" });
  const image = `${TEST_IMAGE}-${what}`;
  const name = containerName(what);
  try {
    await Deno.writeTextFile(`${dir}/Dockerfile`, `FROM ${TEST_IMAGE}\n${lines}`);
    await must("docker", ["build", "-q", "-t", image, dir]);
    await fn(image, name);
  } finally {
    await remove("docker", [name]);
    await engine("docker", ["rmi", "-f", image]);
    await Deno.remove(dir, { recursive: true });
  }
}

dockerTest(
  'HEALTHCHECK CMD ["/denit", "probe"]: healthy, then unhealthy once a --stop-signal drains',
  async () => {
    // Docker runs an exec-form health command without a shell: the image has none. The
    // container's stop signal is USR1 here (a pod's stopSignal, or docker --stop-signal):
    // with --stop-signal USR1 it starts the shutdown delay, so /readyz fails and the probe too.
    const healthcheck = `ENV DENIT_HEALTH_ADDR=127.0.0.1:7623\n` +
      `HEALTHCHECK --interval=300ms --timeout=5s --retries=1 ` +
      `CMD ["/denit", "probe", "--path", "/readyz"]\n`;
    await withHealthImage("health", healthcheck, async (image, name) => {
      await must("docker", [
        ...detached(name),
        "--stop-signal",
        "USR1",
        "-e",
        "DENIT_STOP_SIGNAL=USR1",
        "-e",
        "DENIT_SHUTDOWN_DELAY=60s",
        image,
        ...ECHO,
        "SIGUSR1",
        "0",
      ]);
      const healthy = await healthIs(name, "healthy");
      assertMatch(
        healthy,
        /^denit probe: http:\/\/127\.0\.0\.1:7623\/readyz: 200 OK in \d+ ms: ready/,
      );
      await must("docker", ["kill", "-s", "USR1", name]);
      const unhealthy = await healthIs(name, "unhealthy");
      assertMatch(unhealthy, /: 503 Service Unavailable in \d+ ms: stopping: .*--shutdown-delay/);
      // Held for the delay: the child has not had it yet.
      const logs = await engine("docker", ["logs", name]);
      assertOk(!logs.stdout.includes("SIGUSR1"), logs.stdout);
    });
  },
);

dockerTest(
  "HEALTHCHECK with denit probe and no health endpoint: unhealthy, with the reason",
  async () => {
    const healthcheck = `HEALTHCHECK --interval=300ms --timeout=5s --retries=2 ` +
      `CMD ["/denit", "probe", "--timeout", "1s"]\n`;
    await withHealthImage("nohealth", healthcheck, async (image, name) => {
      await must("docker", [...detached(name), image, ...ECHO]);
      const output = await healthIs(name, "unhealthy");
      assertMatch(output, /^denit probe: http:\/\/127\.0\.0\.1:7623\/healthz: connection refused/);
    });
  },
);

dockerTest(
  "GitLab Runner's native steps: the listening line at once, argv byte for byte, docker stop's code; -g --grace ends the job's leftovers",
  async () => {
    // The runner keeps the image's ENTRYPOINT and runs `<helper> steps serve` under it, then
    // waits for the line on the container's stderr (here /steps stands in for the helper).
    const name = containerName("steps");
    const grouped = containerName("steps-group");
    try {
      const arg = "a b\t'c\"d \u00e9 $HOME *";
      await must("docker", [...detached(name), TEST_IMAGE, "/steps", "steps", "serve", arg]);
      const logs = await logsMatch("docker", name, /step-runner is listening on socket/, 10_000);
      const stderr = (await run(["docker", "logs", name])).stderr;
      assertEquals(stderr, "step-runner is listening on socket /tmp/step-runner.sock\n");
      const hex = (text: string) =>
        Array.from(new TextEncoder().encode(text), (b) => b.toString(16).padStart(2, "0")).join("");
      assertOk(logs.startsWith(`${["steps", "serve", arg].map(hex).join("-")}\n`), logs);
      const stop = await run(["docker", "stop", "-t", "10", name]);
      assertEquals(stop.code, 0, stop.stderr);
      assertEquals((await exitState("docker", name)).code, 3);
      // FF_USE_NATIVE_CONTAINER_STOP: the stop signal to PID 1 only, SIGKILL after the timeout.
      // -g passes it to the job's whole group (the step ends, then the server with 3; without
      // -g the server would wait for the step until SIGKILL, 137); --grace ends what ignores
      // it, well inside the timeout.
      await must("docker", [
        ...detached(grouped),
        ...["--entrypoint", "/denit", TEST_IMAGE, "-g", "--grace", "2s", "--"],
        ...["/steps", "steps", "serve", "--job", "--leftover"],
      ]);
      await logsMatch("docker", grouped, /step-runner is listening on socket/, 10_000);
      const started = performance.now();
      const stopped = await run(["docker", "stop", "-t", "30", grouped], { timeoutMs: 40_000 });
      const took = performance.now() - started;
      assertEquals(stopped.code, 0, stopped.stderr);
      assertEquals((await exitState("docker", grouped)).code, 3);
      assertOk(took < 10_000, `docker stop took ${took.toFixed(0)} ms`);
      const after = (await run(["docker", "logs", grouped])).stderr;
      assertMatch(after, /stopping\n/);
      assertMatch(
        after,
        /SIGKILL to leftovers still running at the end of the grace period \(2s\): \d+ \(steps\)/,
      );
    } finally {
      await remove("docker", [name, grouped]);
    }
  },
);
