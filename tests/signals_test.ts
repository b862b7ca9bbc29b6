/** Signal forwarding against the real denit: each signal, --group, --rewrite, --grace, USR1. */

import { assertEquals, assertOk } from "./assert.ts";
import {
  cleanup,
  DENIT,
  denitArgv,
  denitPid,
  ECHO,
  FIXTURES,
  hostPid,
  killPid,
  MODES,
  processState,
  run,
  Running,
  staticFixture,
} from "./helpers.ts";
import { SIGNAL_TABLE } from "../src/common/signals.ts";

// SIGTERM ends the echo child; SIGTSTP and SIGCONT would stop and resume it if not caught.
const EACH = SIGNAL_TABLE.filter((row) => row.action === "forward").map((row) => row.name)
  .filter((name) => name !== "SIGTERM");

for (const mode of MODES) {
  Deno.test(`${mode}: every forwarded signal reaches the child, in order`, async () => {
    const proc = new Running(denitArgv(mode, ["--", ...ECHO]));
    try {
      await proc.waitFor(/^ready /);
      const pid = denitPid(proc, mode);
      let from = 0;
      for (const name of EACH) {
        killPid(pid, name);
        from = await proc.waitFor(new RegExp(`^${name}$`), { from }) + 1;
      }
      killPid(pid, "SIGTERM");
      await proc.waitFor(/^SIGTERM$/, { from });
      const status = await proc.status();
      assertEquals(status.code, 0, status.stderr);
      assertEquals(status.stderr, "");
    } finally {
      await proc.stop();
    }
  });

  Deno.test(`${mode}: signals 32 and 33 (the C library's own) neither end denit nor reach the child`, async () => {
    const argv = denitArgv(mode, ["--", ...ECHO]);
    const proc = new Running([staticFixture("reserved_default"), ...argv]);
    let echo = 0;
    try {
      const ready = proc.lines[await proc.waitFor(/^ready /)] ?? "";
      echo = hostPid(proc.child.pid, Number(ready.split(" ")[1]));
      const pid = denitPid(proc, mode);
      for (const signo of [32, 33]) {
        const kill = await run(["kill", `-${signo}`, String(pid)]);
        assertEquals(kill.code, 0, kill.stderr);
      }
      // The echo child's default for 32 and 33 is to end: a later signal shows it lives on.
      killPid(pid, "SIGUSR1");
      await proc.waitFor(/^SIGUSR1$/);
      killPid(pid, "SIGTERM");
      const status = await proc.status();
      assertEquals([status.code, status.stderr], [0, ""]);
      assertEquals(proc.lines.filter((line) => !/^(ready |SIGUSR1$|SIGTERM$)/.test(line)), []);
    } finally {
      await proc.stop();
      cleanup(echo > 0 ? [echo] : []);
    }
  });

  Deno.test(`${mode}: --group reaches a grandchild in the child's process group`, async () => {
    const tree = [...ECHO, "SIGUSR2", "7", "--tree"];
    const grouped = new Running(denitArgv(mode, ["-g", "--", ...tree]));
    const single = new Running(denitArgv(mode, ["--", ...tree]));
    try {
      await grouped.waitFor(/^ready /);
      await single.waitFor(/^ready /);
      killPid(denitPid(single, mode), "SIGHUP");
      // With -g every forwarded signal reaches the grandchild (SIGUSR2, its exit, last).
      let from = 0;
      for (const name of EACH.filter((n) => n !== "SIGUSR2")) {
        killPid(denitPid(grouped, mode), name);
        from = await grouped.waitFor(new RegExp(`^${name}$`), { from }) + 1;
      }
      killPid(denitPid(grouped, mode), "SIGUSR2");
      assertEquals((await grouped.status()).code, 7);
      // Without -g the child (the echo's --tree) swallows SIGHUP and the grandchild never sees it;
      // SIGUSR2 sent straight to the grandchild after it ends the test in order.
      const grandchild = hostPid(denitPid(single, mode), Number(single.line(0).split(" ")[1]));
      killPid(grandchild, "SIGUSR2");
      assertEquals((await single.status()).code, 7);
      assertEquals(single.lines.includes("SIGHUP"), false, single.lines.join("|"));
    } finally {
      await grouped.stop();
      await single.stop();
    }
  });

  Deno.test(`${mode}: -g: a member of the child's group gets the stop once, not again as a leftover`, async () => {
    // The member counts each TERM and stays (to many programs a second one means "quit now");
    // the child ends at its TERM, and --kill-after's SIGKILL ends the member.
    const member = `trap 'echo term' TERM; echo ready; while :; do sleep 0.05; done`;
    const script = `sh -c "${member}" & trap 'exit 0' TERM; while :; do sleep 0.05; done`;
    const argv = ["-g", "--kill-after", "1s", "--", "sh", "-c", script];
    const proc = new Running(denitArgv(mode, argv));
    try {
      await proc.waitFor(/^ready$/);
      killPid(denitPid(proc, mode), "SIGTERM");
      const status = await proc.status();
      assertEquals([status.code, proc.lines], [0, ["ready", "term"]], status.stderr);
    } finally {
      await proc.stop();
    }
  });

  Deno.test(`${mode}: --rewrite sends the new signal; TO=0 drops it`, async () => {
    const proc = new Running(
      denitArgv(mode, ["-r", "TERM:QUIT", "-r", "SIGHUP:0", "--", ...ECHO, "SIGQUIT", "3"]),
    );
    try {
      await proc.waitFor(/^ready /);
      const pid = denitPid(proc, mode);
      killPid(pid, "SIGHUP");
      killPid(pid, "SIGUSR1");
      await proc.waitFor(/^SIGUSR1$/);
      killPid(pid, "SIGTERM");
      const status = await proc.status();
      assertEquals(status.code, 3);
      assertEquals(proc.lines.slice(1), ["SIGUSR1", "SIGQUIT"]);
    } finally {
      await proc.stop();
    }
  });

  Deno.test(`${mode}: --grace SIGKILLs a child that ignores SIGTERM (exit 137)`, async () => {
    const child = ["sh", "-c", `trap '' TERM; echo ready; exec sleep 60`];
    const proc = new Running(denitArgv(mode, ["--grace", "300ms", "--", ...child]));
    try {
      await proc.waitFor(/^ready$/);
      const started = performance.now();
      killPid(denitPid(proc, mode), "SIGTERM");
      const status = await proc.status();
      assertEquals(status.code, 137, status.stderr);
      assertOk(performance.now() - started >= 300, "killed before the grace period ended");
    } finally {
      await proc.stop();
    }
  });

  Deno.test(`${mode}: without --grace a child that ignores SIGTERM keeps running`, async () => {
    const child = [
      "sh",
      "-c",
      `trap '' TERM; trap 'exit 9' USR2; echo ready; while :; do sleep 0.05; done`,
    ];
    const proc = new Running(denitArgv(mode, ["--", ...child]));
    try {
      await proc.waitFor(/^ready$/);
      const pid = denitPid(proc, mode);
      killPid(pid, "SIGTERM");
      killPid(pid, "SIGUSR2");
      const status = await proc.status();
      assertEquals(status.code, 9, "SIGTERM must not have killed the child");
    } finally {
      await proc.stop();
    }
  });
}

Deno.test("--pdeathsig: denit gets the signal when its parent dies and forwards it", async () => {
  // sh starts denit in the background and waits; killing sh makes denit's parent die.
  const script = `"$@" & echo "denit $!"; wait`;
  const argv = [...DENIT, "-s", "-p", "USR2", "--", ...ECHO, "SIGUSR2", "5"];
  const parent = new Running(["sh", "-c", script, "sh", ...argv]);
  const pids: number[] = [];
  try {
    const at = await parent.waitFor(/^denit \d+$/);
    pids.push(Number(parent.line(at).split(" ")[1]));
    pids.push(Number(parent.line(await parent.waitFor(/^ready /)).split(" ")[1]));
    parent.kill("SIGKILL");
    // Only the parent died: SIGUSR2 can only come from the parent-death signal, via denit.
    await parent.waitFor(/^SIGUSR2$/);
  } finally {
    parent.kill("SIGKILL");
    // On success both exited already; after a failure, denit and its child go by pid.
    cleanup(pids);
  }
});

for (const mode of MODES) {
  Deno.test(`${mode}: 2,000 mixed signals while 1,000 orphans exit: final TERM arrives`, async () => {
    // The child execs the echo program; its background orphan maker counts zombies in the
    // namespace (pid1) or among denit's children (subreaper) and prints "zombies 0".
    const parent = mode === "pid1" ? "" : "$PPID";
    const script = `${FIXTURES}/orphans.sh 1000 ${parent} & exec "$@"`;
    const proc = new Running(denitArgv(mode, ["--", "sh", "-c", script, "sh", ...ECHO]));
    try {
      await proc.waitFor(/^ready /);
      const pid = denitPid(proc, mode);
      const mix: Deno.Signal[] = [
        "SIGHUP",
        "SIGUSR1",
        "SIGUSR2",
        "SIGWINCH",
        "SIGALRM",
        "SIGCONT",
        "SIGURG",
        "SIGPWR",
      ];
      for (let i = 0; i < 2000; i++) killPid(pid, mix[i % mix.length] ?? "SIGHUP");
      await proc.waitFor(/^zombies 0$/, { timeoutMs: 30_000 });
      killPid(pid, "SIGTERM");
      const status = await proc.status(30_000);
      assertEquals(status.code, 0, status.stderr);
      assertEquals(proc.lines.at(-1), "SIGTERM");
      // Same-signal deliveries coalesce in the kernel, but every kind must have arrived.
      for (const name of mix) assertOk(proc.lines.includes(name), `${name} never arrived`);
    } finally {
      await proc.stop();
    }
  });
}

Deno.test("SIGTTIN and SIGTTOU do not stop denit and are not forwarded", async () => {
  const proc = new Running([...DENIT, "-s", "--", ...ECHO, "SIGHUP"]);
  try {
    await proc.waitFor(/^ready /);
    killPid(proc.child.pid, "SIGTTIN");
    killPid(proc.child.pid, "SIGTTOU");
    killPid(proc.child.pid, "SIGUSR2");
    await proc.waitFor(/^SIGUSR2$/);
    const state = processState(proc.child.pid);
    assertOk(state !== "T", "denit is stopped");
    killPid(proc.child.pid, "SIGHUP");
    assertEquals((await proc.status()).code, 0);
    assertEquals(proc.lines.slice(1), ["SIGUSR2", "SIGHUP"]);
  } finally {
    await proc.stop();
  }
});

Deno.test("a storm of forwarded signals never keeps denit from reaping its killed child: 500 runs, each ends within 100 ms of the storm", async () => {
  // Each run: USR1, USR2, HUP, WINCH, URG and CONT to denit as fast as one sender can for
  // 30 ms, the child SIGKILLed at a random moment within it (fixtures/storm.c).
  const result = await run([staticFixture("storm"), "500", "30", ...DENIT, "-s", "--"], {
    timeoutMs: 600_000,
  });
  assertEquals(result.code, 0, result.stderr);
  const figures = JSON.parse(result.stdout);
  assertEquals(
    [figures.runs, figures.stalls, figures.not_137, figures.failed],
    [500, 0, 0, 0],
    result.stdout,
  );
});
