/**
 * denit as the init of real OCI containers (runc), in a shell-less rootfs that holds only the
 * Deno runtime, its libraries and the bundle: the distroless stand-in.
 */

import { assertEquals, assertMatch, assertOk } from "../assert.ts";
import { DENO, freePort } from "../helpers.ts";
import {
  CAN_RUNC,
  CHILD,
  Container,
  DENIT_ENTRY,
  DENIT_ROOTFS,
  ECHO,
  runContainer,
} from "./oci.ts";
import { buildGlibcRootfs } from "../../fixtures/rootfs.ts";
import { call, client, finished, type Job, output, outputMatches } from "../jobs_client.ts";

const ENABLED = CAN_RUNC && (() => {
  try {
    return Deno.statSync(`${DENIT_ROOTFS}/denit.js`).isFile;
  } catch {
    return false;
  }
})();
if (!ENABLED) {
  // deno-lint-ignore no-console -- skipped tests must say why
  console.warn("SKIP container tests: need root, runc and dist/rootfs (make rootfs)");
}

function containerTest(name: string, fn: () => Promise<void>): void {
  Deno.test({ name: `runc: ${name}`, ignore: !ENABLED, fn });
}

containerTest("the rootfs has no shell and no coreutils", () => {
  for (const path of ["/bin/sh", "/usr/bin/sh", "/bin/cp", "/usr/bin/env", "/bin/busybox"]) {
    assertOk(!exists(`${DENIT_ROOTFS}${path}`), `${path} is in the rootfs`);
  }
  return Promise.resolve();
});

function exists(path: string): boolean {
  try {
    Deno.lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

containerTest("exit codes and 128+N pass through from inside the container", async () => {
  const [three, zero, term, kill] = await Promise.all([
    runContainer({ rootfs: DENIT_ROOTFS, args: [...DENIT_ENTRY, "--", ...CHILD, "exit", "3"] }),
    runContainer({ rootfs: DENIT_ROOTFS, args: [...DENIT_ENTRY, "--", ...CHILD, "exit", "0"] }),
    runContainer({
      rootfs: DENIT_ROOTFS,
      args: [...DENIT_ENTRY, "--", ...CHILD, "die", "SIGTERM"],
    }),
    runContainer({
      rootfs: DENIT_ROOTFS,
      args: [...DENIT_ENTRY, "--", ...CHILD, "die", "SIGKILL"],
    }),
  ]);
  assertEquals([three.code, zero.code, term.code, kill.code], [3, 0, 143, 137], three.stderr);
});

containerTest("runc kill TERM reaches the child; the container exits with its code", async () => {
  const container = new Container({
    rootfs: DENIT_ROOTFS,
    args: [...DENIT_ENTRY, "--", ...ECHO, "SIGTERM", "42"],
  });
  try {
    await container.waitFor(/^ready /);
    await container.kill("TERM");
    const { code, stderr } = await container.status();
    assertEquals(code, 42, stderr);
    assertOk(container.lines.includes("SIGTERM"));
  } finally {
    await container.remove();
  }
});

containerTest(
  "a child ignoring TERM is SIGKILLed after --grace; runc kill KILL still works",
  async () => {
    const graced = new Container({
      rootfs: DENIT_ROOTFS,
      args: [...DENIT_ENTRY, "--grace", "500ms", "--", ...CHILD, "ignore-term"],
    });
    const stuck = new Container({
      rootfs: DENIT_ROOTFS,
      args: [...DENIT_ENTRY, "--", ...CHILD, "ignore-term"],
    });
    try {
      await graced.waitFor(/^ready$/);
      await stuck.waitFor(/^ready$/);
      const started = performance.now();
      await graced.kill("TERM");
      await stuck.kill("TERM");
      const graceEnd = await graced.status();
      assertEquals(graceEnd.code, 137, graceEnd.stderr);
      assertOk(performance.now() - started >= 500);
      await stuck.waitFor(/^term ignored$/);
      await stuck.kill("KILL");
      assertEquals((await stuck.status()).code, 137);
    } finally {
      await graced.remove();
      await stuck.remove();
    }
  },
);

containerTest("orphans made inside the container are reaped: no zombie left", async () => {
  const result = await runContainer({
    rootfs: DENIT_ROOTFS,
    args: [...DENIT_ENTRY, "--", ...CHILD, "orphans", "5"],
  });
  assertEquals(result.lines, ["orphans 5", "zombies 0"], result.stderr);
  assertEquals(result.code, 0);
});

containerTest(
  "the health endpoint answers from the container (host network namespace)",
  async () => {
    const port = freePort();
    const container = new Container({
      rootfs: DENIT_ROOTFS,
      args: [...DENIT_ENTRY, "--health-addr", `127.0.0.1:${port}`, "--", ...CHILD, "ignore-term"],
      hostNetwork: true,
    });
    try {
      await container.waitFor(/^ready$/);
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
      assertEquals([ready.status, await ready.text()], [200, "ready\n"]);
      const status = await (await fetch(`http://127.0.0.1:${port}/status`)).json();
      assertEquals(status.state, "running");
      assertEquals(status.supervisor.pid, 1);
    } finally {
      await container.remove();
    }
  },
);

containerTest("read-only rootfs and a non-root user both work", async () => {
  const result = await runContainer({
    rootfs: DENIT_ROOTFS,
    readonly: true,
    user: { uid: 65532, gid: 65532 },
    args: [...DENIT_ENTRY, "--", ...CHILD, "whoami", "9"],
  });
  assertEquals(result.lines, [
    "uid 65532 gid 65532",
    "ids 65532 65532 65532 65532 / 65532 65532 65532 65532",
    "groups",
    "home /home/nonroot", // runc's own HOME for a uid with a passwd entry
    "rootfs-writable false",
  ], result.stderr);
  assertEquals(result.code, 9);
});

containerTest(
  "--user: denit (root) runs the child as nonroot, read-only root, no shell",
  async () => {
    const [named, numeric] = await Promise.all([
      runContainer({
        rootfs: DENIT_ROOTFS,
        readonly: true,
        args: [...DENIT_ENTRY, "--user", "nonroot", "--", ...CHILD, "whoami", "9"],
      }),
      runContainer({
        rootfs: DENIT_ROOTFS,
        readonly: true,
        args: [...DENIT_ENTRY, "-u", "1001:123", "--", ...CHILD, "whoami", "0"],
      }),
    ]);
    assertEquals(named.lines, [
      "uid 65532 gid 65532",
      "ids 65532 65532 65532 65532 / 65532 65532 65532 65532",
      "groups 65532",
      "home /home/nonroot",
      "rootfs-writable false",
    ], named.stderr);
    assertEquals(named.code, 9, named.stderr);
    assertEquals(numeric.lines.slice(0, 3), [
      "uid 1001 gid 123",
      "ids 1001 1001 1001 1001 / 123 123 123 123",
      "groups 123",
    ], numeric.stderr);
    assertEquals(numeric.code, 0, numeric.stderr);
    const unknown = await runContainer({
      rootfs: DENIT_ROOTFS,
      args: [...DENIT_ENTRY, "--user", "runner", "--", ...CHILD, "whoami", "0"],
    });
    assertEquals(unknown.code, 2);
    assertEquals(unknown.lines, []);
    assertEquals(unknown.stderr.trim(), 'denit: Unknown user "runner": not in /etc/passwd');
  },
);

containerTest(
  "init container flow: denit init onto a volume, then run from a shell-less glibc image",
  async () => {
    const work = await Deno.makeTempDir({ prefix: "denit-initflow-" });
    const glibc = `${work}/glibc-rootfs`;
    try {
      buildGlibcRootfs(glibc, DENO);
      for (const path of ["/bin/sh", "/deno", "/denit.js", "/usr/bin/deno"]) {
        assertOk(!exists(`${glibc}${path}`), `${path} in the glibc rootfs`);
      }
      await Deno.mkdir(`${work}/shared`);
      const init = await runContainer({
        rootfs: DENIT_ROOTFS,
        args: [...DENIT_ENTRY, "init", "/shared", "--chown", "65532:65532"],
        volumes: [[`${work}/shared`, "/shared"]],
      });
      assertEquals(init.code, 0, init.stderr);
      const line = init.lines.find((l) => l.startsWith("entrypoint: "));
      assertOk(line !== undefined, init.lines.join("|"));
      const entrypoint: string[] = JSON.parse(line.slice("entrypoint: ".length));
      // The same entrypoint as with the compiled binary: the launcher came along.
      assertEquals(entrypoint, ["/shared/denit", "--"]);
      for (const file of ["denit", "deno", "denit.js", "denit-features.js", "denit-jobs.js"]) {
        assertOk(exists(`${work}/shared/${file}`), `${file} was not copied`);
      }
      // The main container: another image, as a non-root user, with the copied denit as PID 1.
      const main = await runContainer({
        rootfs: glibc,
        user: { uid: 65532, gid: 65532 },
        args: [...entrypoint, "/shared/deno", "eval", "console.log('pid', Deno.pid); Deno.exit(7)"],
        volumes: [[`${work}/shared`, "/shared"]],
      });
      assertEquals(main.code, 7, main.stderr);
      assertMatch(main.lines.join("\n"), /^pid \d+$/m);
    } finally {
      await Deno.remove(work, { recursive: true });
    }
  },
);

containerTest(
  "jobs: a host gRPC client runs, follows and cancels jobs in a shell-less container",
  async () => {
    const shared = await Deno.makeTempDir({ prefix: "denit-jobs-runc-" });
    const container = new Container({
      rootfs: DENIT_ROOTFS,
      args: [
        ...DENIT_ENTRY,
        "--jobs-socket",
        "/run/denit/jobs.sock",
        "--jobs-spool",
        "/run/denit/spool",
        "--",
        ...CHILD,
        "ignore-term",
      ],
      volumes: [[shared, "/run/denit"]],
    });
    const c = client(`${shared}/jobs.sock`);
    try {
      await container.waitFor(/^ready$/);
      // The image's Deno runs the jobs: there is no shell or coreutils in there.
      await call<Job>((cb) => c.Run({ id: "who", argv: [...CHILD, "whoami", "7"] }, cb));
      const who = await finished(c, "who");
      assertEquals([who.status, who.exitCode], ["FAILED", 7]);
      assertMatch((await output(c, "who")).out, /^uid 0 gid 0\n/);
      await call<Job>((cb) => c.Run({ id: "none", argv: ["sh", "-c", "true"] }, cb));
      const none = await finished(c, "none");
      assertEquals([none.status, none.exitCode], ["FAILED", 127]);
      assertMatch((await output(c, "none")).err, /^denit: Cannot start "sh": command not found\n$/);
      await call<Job>((cb) => c.Run({ id: "stuck", argv: [...CHILD, "ignore-term"] }, cb));
      await outputMatches(c, "stuck", /^ready$/m);
      const stuck = await call<Job>((cb) => c.Cancel({ id: "stuck", graceMs: 500 }, cb));
      assertEquals([stuck.status, stuck.signal], ["CANCELLED", "SIGKILL"]);
      const { jobs } = await call<{ jobs: Job[] }>((cb) => c.List({}, cb));
      assertEquals(jobs.map((j) => j.id), ["who", "none", "stuck"]);
    } finally {
      c.close();
      await container.remove();
      await Deno.remove(shared, { recursive: true });
    }
  },
);
