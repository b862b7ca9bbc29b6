/**
 * The Kubernetes examples of fixtures/k8s/, run for real by `podman kube play` (Podman 4.3,
 * Debian's), with images built here and tagged with the names the manifests use: the pods
 * start, the init container's copy of denit is the main container's PID 1, denit's endpoint
 * answers inside the pod, the probes behave as Podman implements them, and `podman pod stop`
 * ends each with the exit code the README documents.
 *
 * Two defects of Podman 4.3 are worked around here, never in the manifests users copy:
 * - its default open-file and process limits (1048576) are above this host's hard limits, so
 *   runc cannot set them (containers/podman#6857, #17358): a containers.conf of the test's
 *   sets lower ones;
 * - under the default `restartPolicy: Always` it restarts init containers after they succeed
 *   and then cannot remove them (containers/podman#15631, #16343; fixed in 4.6 by #18481):
 *   the test plays a copy with `restartPolicy: OnFailure`.
 * Pods use slirp4netns networking: Podman 4.3 refuses the manifests' ports without it, and this
 * machine has no bridge networking.
 */

import { parse, stringify } from "yaml";
import { assertEquals, assertMatch, assertOk } from "../assert.ts";
import { ROOT, run } from "../helpers.ts";
import { engineProblem, GLIBC_IMAGE, IMAGE, images, must, TEST_IMAGE } from "./engines.ts";

const PROBLEM = Deno.uid() === 0 ? await engineProblem("podman") : null;
if (Deno.uid() !== 0) {
  // deno-lint-ignore no-console -- a skipped test must say why
  console.warn("SKIP podman tests: they need root");
}

/** The tags the manifests use, and what each stands for here. */
async function tagImages(): Promise<void> {
  await images("podman");
  const dir = await Deno.makeTempDir({ prefix: "denit-runner-image-" });
  try {
    // The ARC example's init image: denit plus the runner's files (its run.sh, here a server).
    const built = await run([
      "gcc",
      "-O2",
      "-static",
      "-o",
      `${dir}/run.sh`,
      `${ROOT}fixtures/server.c`,
    ]);
    if (built.code !== 0) throw new Error(built.stderr);
    await Deno.writeTextFile(
      `${dir}/Dockerfile`,
      `FROM ${IMAGE}\nCOPY run.sh /actions-runner/run.sh\n`,
    );
    await must("podman", ["build", "-q", "-t", "example.com/actions-runner-with-denit:2.0", dir]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  for (
    const [image, tag] of [
      [IMAGE, "example.com/denit:0.1.0"],
      [TEST_IMAGE, "example.com/demo-app:1.0"],
      [GLIBC_IMAGE, "example.com/demo-server:1.0"],
      [GLIBC_IMAGE, "example.com/runner-base:2.0"],
    ] as const
  ) {
    await must("podman", ["tag", image, tag]);
  }
}

/** The manifest as the test plays it (see the workarounds above), and its containers.conf. */
async function playable(
  file: string,
  dir: string,
): Promise<{ yaml: string; env: Record<string, string> }> {
  const pod = parse(await Deno.readTextFile(`${ROOT}fixtures/k8s/${file}`)) as {
    spec: Record<string, unknown>;
  };
  pod.spec.restartPolicy = "OnFailure"; // containers/podman#15631
  await Deno.writeTextFile(`${dir}/${file}`, stringify(pod));
  await Deno.writeTextFile(
    `${dir}/containers.conf`,
    '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]\n', // #17358
  );
  return { yaml: `${dir}/${file}`, env: { CONTAINERS_CONF: `${dir}/containers.conf` } };
}

async function podman(args: readonly string[], env: Record<string, string> = {}) {
  return await run(["podman", ...args], { env, timeoutMs: 120_000 });
}

async function logsMatch(container: string, pattern: RegExp): Promise<string> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const logs = await podman(["logs", container]);
    if (pattern.test(logs.stdout + logs.stderr)) return logs.stdout + logs.stderr;
    if (Date.now() > deadline) {
      throw new Error(`${container}: no ${pattern}: ${logs.stdout}${logs.stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function exitCode(container: string): Promise<number> {
  return Number((await must("podman", ["inspect", "-f", "{{.State.ExitCode}}", container])).trim());
}

function podmanTest(name: string, fn: () => Promise<void>): void {
  Deno.test({
    name: `podman kube play: ${name}`,
    ignore: Deno.uid() !== 0,
    fn: async () => {
      if (PROBLEM !== null) throw new Error(PROBLEM);
      await tagImages();
      await fn();
    },
  });
}

/**
 * Plays a manifest, runs `check`, stops the pod (`podman pod stop`, as kubelet would stop it)
 * and returns the exit codes of `containers` and how long the stop took.
 */
async function withPod(
  file: string,
  pod: string,
  containers: readonly string[],
  check: () => Promise<void>,
): Promise<{ codes: number[]; stopMs: number }> {
  const dir = await Deno.makeTempDir({ prefix: "denit-kube-" });
  const { yaml, env } = await playable(file, dir);
  try {
    const played = await podman(["kube", "play", "--network", "slirp4netns", yaml], env);
    assertEquals(played.code, 0, played.stderr);
    try {
      await check();
    } catch (error) {
      // What Podman saw, so that a failure on another machine explains itself.
      const seen = await podman(["ps", "-a", "--pod", "--format", "{{.Names}} {{.Status}}"]);
      throw new Error(
        `${error instanceof Error ? error.message : error}; containers: ${
          seen.stdout.trim().replaceAll("\n", "; ")
        }`,
      );
    }
    const started = performance.now();
    const stopped = await podman(["pod", "stop", "-t", "40", pod]);
    assertEquals(stopped.code, 0, stopped.stderr);
    const stopMs = performance.now() - started;
    const codes: number[] = [];
    for (const container of containers) codes.push(await exitCode(container));
    if (codes.some((code) => code !== 0)) {
      for (const container of containers) {
        const logs = await podman(["logs", container]);
        // deno-lint-ignore no-console -- a failing stop shows the container's own words
        console.error(`${container}: ${logs.stdout}${logs.stderr}`);
      }
    }
    return { codes, stopMs };
  } finally {
    await podman(["kube", "down", yaml], env);
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * An HTTP GET from inside a container of the pod, by the Deno of its denit (the images have no
 * curl): `/deno`, or the copy's beside it.
 */
async function getInside(container: string, path: string, deno = "/deno"): Promise<number> {
  const script = `try { const r = await fetch("http://127.0.0.1:7623${path}"); ` +
    "await r.body?.cancel(); console.log(r.status) } catch { console.log(0) }";
  const result = await podman(["exec", container, deno, "eval", script]);
  return Number(result.stdout.trim());
}

/**
 * The command line of a container's PID 1: denit's launcher has exec'd the runtime by now, with
 * the launcher's path as its first word.
 */
async function pid1(container: string): Promise<string> {
  const line = (await must("podman", ["top", container, "pid", "args"])).split("\n")
    .find((row) => /^1\s/.test(row)) ?? "";
  return line.replace(/^1\s+/, "").trim();
}

/** The launched runtime's command line for denit in `dir` with `args`. */
function launched(dir: string, args: string): RegExp {
  const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
  return new RegExp(`^${escape(`${dir}/denit run `)}.*${escape(`${dir}/denit.js ${args}`)}$`);
}

podmanTest(
  "pod-entrypoint.yaml: ready once the app listens; a stop drains first, exit 0",
  async () => {
    const app = "app-with-denit-app";
    const { codes, stopMs } = await withPod(
      "pod-entrypoint.yaml",
      "app-with-denit",
      [app],
      async () => {
        await logsMatch(app, /^listening 8080$/m);
        // --ready-when tcp:8080 passes once the server listens (checked once a second).
        const deadline = Date.now() + 5000;
        while (await getInside(app, "/readyz") !== 200) {
          assertOk(Date.now() < deadline, "/readyz never turned 200");
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
        assertEquals(await getInside(app, "/healthz"), 200);
        const args = "--health-addr :7623 --ready-when tcp:8080 --shutdown-delay 5s --grace 20s " +
          "-- /app/server --port 8080";
        assertMatch(await pid1(app), launched("", args));
        // Podman implements httpGet probes as `curl` run through a shell inside the container
        // (CMD-SHELL, and port 0 for a named port): in a shell-less image they cannot pass.
        const probe = await must("podman", [
          "inspect",
          "-f",
          "{{json .Config.Healthcheck.Test}}",
          app,
        ]);
        assertMatch(probe, /"CMD-SHELL","curl"/);
        assertEquals((await podman(["healthcheck", "run", app])).code, 1);
      },
    );
    // The stop: TERM is held 5 s (--shutdown-delay), then the server exits 0 on it.
    assertEquals(codes, [0]);
    assertOk(stopMs >= 5000 && stopMs < 20_000, `the stop took ${stopMs.toFixed(0)} ms`);
  },
);

podmanTest(
  "pod-init-container.yaml: the app's own image runs the copied denit as PID 1",
  async () => {
    // The init container ran and was removed (Podman runs init containers once); its copy of
    // denit, in the volume, is the app's PID 1.
    const app = "init-container-denit-app";
    const { codes } = await withPod(
      "pod-init-container.yaml",
      "init-container-denit",
      [app],
      async () => {
        await logsMatch(app, /^listening 8080$/m);
        assertMatch(await pid1(app), launched("/denit-volume", "-- /app/server"));
      },
    );
    assertEquals(codes, [0]);
  },
);

podmanTest(
  "pod-arc-runner.yaml: runner files copied with their owner; runs as 1001; a stop waits for the job",
  async () => {
    const runner = "arc-runner-runner";
    const deno = "/runner/deno";
    const { codes } = await withPod("pod-arc-runner.yaml", "arc-runner", [runner], async () => {
      await logsMatch(runner, /^listening 8080$/m);
      assertMatch(
        await pid1(runner),
        launched(
          "/runner",
          "--shutdown-delay 1h --drain-while file:/runner/job-running --grace 50s " +
            "--health-addr :7623 -- /runner/run.sh",
        ),
      );
      const users = await must("podman", ["top", runner, "user", "group", "args"]);
      assertMatch(users, /^1001\s+123\s+\/runner\/run\.sh/m);
      // --chown 1001:123 of the copy (read from a tar of the file: the image has no ls).
      const tar = await run(["sh", "-c", `podman cp ${runner}:/runner/run.sh - | tar -tvf -`]);
      assertMatch(tar.stdout, /^-rwxr-xr-x 1001\/123 /m);
      // A job runs (the job-started hook's file): the stop is held, not ready meanwhile.
      const job = (code: string) => must("podman", ["exec", runner, deno, "eval", code]);
      await job('Deno.writeTextFileSync("/runner/job-running", "")');
      await must("podman", ["kill", "--signal", "TERM", runner]);
      const deadline = Date.now() + 10_000;
      while (await getInside(runner, "/readyz", deno) !== 503) {
        assertOk(Date.now() < deadline, "/readyz never turned 503 after the stop");
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      await new Promise((resolve) => setTimeout(resolve, 1000)); // four checks of the file
      const state = await must("podman", ["inspect", "-f", "{{.State.Status}}", runner]);
      assertEquals(state.trim(), "running", "the stop went on while the job ran");
      // The job ends (the job-completed hook): the runner gets the stop and ends at once.
      await job('Deno.removeSync("/runner/job-running")');
      const waited = await podman(["wait", runner]);
      assertEquals(waited.stdout.trim(), "0", waited.stderr);
    });
    assertEquals(codes, [0]);
  },
);

/** A Podman test outside kube play, with the test's containers.conf (the limits above). */
function podmanRunTest(name: string, fn: (env: Record<string, string>) => Promise<void>): void {
  Deno.test({
    name: `podman: ${name}`,
    ignore: Deno.uid() !== 0,
    fn: async () => {
      if (PROBLEM !== null) throw new Error(PROBLEM);
      await tagImages();
      const dir = await Deno.makeTempDir({ prefix: "denit-podman-" });
      try {
        await Deno.writeTextFile(
          `${dir}/containers.conf`,
          '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]\n',
        );
        await fn({ CONTAINERS_CONF: `${dir}/containers.conf` });
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}

podmanRunTest(
  "denit's image as a read-only volume at /opt/denit (--mount type=image) supervises an image without denit",
  async (env) => {
    const app = `denit-image-volume-${crypto.randomUUID().slice(0, 8)}`;
    try {
      const started = await podman([
        ...["run", "-d", "--name", app, "--network", "none", "--read-only"],
        ...["--mount", `type=image,source=${IMAGE},destination=/opt/denit`],
        ...["--entrypoint", "/opt/denit/denit", GLIBC_IMAGE, "--", "/app/server", "--port", "8080"],
      ], env);
      assertEquals(started.code, 0, started.stderr);
      await logsMatch(app, /^listening 8080$/m);
      assertMatch(await pid1(app), launched("/opt/denit", "-- /app/server --port 8080"));
      const stopped = await podman(["stop", "-t", "10", app], env);
      assertEquals(stopped.code, 0, stopped.stderr);
      assertEquals(await exitCode(app), 0);
    } finally {
      await podman(["rm", "-f", app]);
    }
    // The manifest as written: Podman 4.3's kube play has no image volumes; a later one runs it.
    const dir = await Deno.makeTempDir({ prefix: "denit-kube-" });
    try {
      const { yaml, env: playEnv } = await playable("pod-image-volume.yaml", dir);
      const played = await podman(["kube", "play", "--network", "slirp4netns", yaml], playEnv);
      if (played.code !== 0) {
        assertMatch(played.stderr, /are currently the only supported VolumeSource/);
        // deno-lint-ignore no-console -- a skipped part must say why
        console.warn(`SKIP kube play of pod-image-volume.yaml: ${played.stderr.trim()}`);
        return;
      }
      await logsMatch("image-volume-denit-app", /^listening 8080$/m);
    } finally {
      await podman(["pod", "rm", "-f", "image-volume-denit"]);
      await Deno.remove(dir, { recursive: true });
    }
  },
);

podmanRunTest(
  "--init --init-path with the runtime and bundles mounted beside it: PID 1 is denit, a stop exits 0",
  async (env) => {
    const app = `denit-init-path-${crypto.randomUUID().slice(0, 8)}`;
    // Podman mounts the init at /run/podman-init: the launcher finds what it runs beside it.
    const beside = ["deno", "denit.js", "denit-features.js"].flatMap((name) => [
      "-v",
      `${ROOT}dist/${name}:/run/${name}:ro`,
    ]);
    try {
      const started = await podman([
        ...["run", "-d", "--name", app, "--network", "none", "--read-only"],
        ...["--init", "--init-path", `${ROOT}dist/denit`, ...beside],
        ...[GLIBC_IMAGE, "/app/server", "--port", "8080"],
      ], env);
      assertEquals(started.code, 0, started.stderr);
      await logsMatch(app, /^listening 8080$/m);
      assertMatch(await pid1(app), / \/run\/denit\.js -- \/app\/server --port 8080$/);
      const stopped = await podman(["stop", "-t", "10", app], env);
      assertEquals(stopped.code, 0, stopped.stderr);
      assertEquals(await exitCode(app), 0);
    } finally {
      await podman(["rm", "-f", app]);
    }
  },
);

podmanRunTest(
  "--init --init-path with denit's launcher alone: 125 and one line that points the way",
  async (env) => {
    const result = await podman([
      ...["run", "--rm", "--network", "none", "--init", "--init-path", `${ROOT}dist/denit`],
      ...[GLIBC_IMAGE, "/app/server", "--port", "8080"],
    ], env);
    assertEquals(result.code, 125, result.stderr);
    assertMatch(
      result.stderr,
      /denit: cannot start the runtime \/run\/deno: No such file or directory; denit is this launcher with the runtime and bundles beside it/,
    );
  },
);
