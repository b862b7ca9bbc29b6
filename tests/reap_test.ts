/** Zombie reaping and the orderly end of leftovers, against the real denit. */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import {
  cleanup,
  denitArgv,
  denitPid,
  exists,
  fifoGate,
  FIXTURES,
  killPid,
  MODES,
  run,
  Running,
} from "./helpers.ts";

for (const mode of MODES) {
  Deno.test(`${mode}: 2,000 orphans are reaped, zero zombies left`, async () => {
    // The fixture counts zombies itself: in the namespace (pid1) or among denit's children.
    const parent = mode === "pid1" ? "" : "$PPID";
    const script = `exec ${FIXTURES}/orphans.sh 2000 ${parent}`;
    const result = await run(denitArgv(mode, ["--", "sh", "-c", script]), { timeoutMs: 60_000 });
    assertEquals(result.stdout, "orphans 2000\nzombies 0\n", result.stderr);
    assertEquals(result.code, 0);
  });

  Deno.test(`${mode}: 1,000 orphans that exit at once (one SIGCHLD) are all reaped`, async () => {
    // They exit while denit is stopped: it finds one SIGCHLD for 1,000 zombies, and reaps round
    // after round (each at most REAP_BATCH) until none is left.
    const gate = await fifoGate("denit-burst-");
    const parent = mode === "pid1" ? "" : "$PPID";
    const script = `exec ${FIXTURES}/orphans.sh 1000 "${parent}" burst ${gate.path}`;
    const proc = new Running(denitArgv(mode, ["--", "sh", "-c", script]));
    let stopped = 0;
    try {
      await proc.waitFor(/^orphans 1000$/, { timeoutMs: 60_000 });
      stopped = denitPid(proc, mode);
      killPid(stopped, "SIGSTOP");
      await gate.open();
      await proc.waitFor(/^exited 1000$/, { timeoutMs: 60_000 });
      killPid(stopped, "SIGCONT");
      await proc.waitFor(/^zombies /, { timeoutMs: 60_000 });
      const status = await proc.status(60_000);
      assertEquals(proc.lines, ["orphans 1000", "exited 1000", "zombies 0"], status.stderr);
      assertEquals(status.code, 0);
    } finally {
      if (stopped > 0 && exists(stopped)) killPid(stopped, "SIGCONT");
      await proc.stop();
      await Deno.remove(gate.dir, { recursive: true });
    }
  });

  Deno.test(`${mode}: leftovers get SIGTERM, then SIGKILL after --kill-after`, async () => {
    // One leftover ignores TERM and must be SIGKILLed; one traps TERM and reports it; one left
    // the child's process group and session (setsid), so only a search of /proc finds it.
    // The child exits only once the TERM-handling leftover has its trap (a marker file says so).
    const script = `(trap '' TERM; exec sleep 60) & a=$!
      m=$(mktemp -d)
      sh -c 'trap "echo leftover-term; exit 0" TERM; echo leftover-ready; : > "$1/ready"
        while :; do sleep 0.05; done' sh "$m" &
      b=$!
      setsid sleep 60 & c=$!
      while [ ! -e "$m/ready" ]; do sleep 0.01; done
      rm -rf "$m"
      echo "pids $$ $a $b $c"
      exit 5`;
    const proc = new Running(
      denitArgv(mode, ["-v", "--kill-after", "400ms", "--", "sh", "-c", script]),
    );
    let pids: number[] = [];
    try {
      const at = await proc.waitFor(/^pids /);
      pids = proc.line(at).split(" ").slice(1).map(Number);
      await proc.waitFor(/^leftover-ready$/);
      const status = await proc.status(15_000);
      assertEquals(status.code, 5, status.stderr);
      assertOk(proc.lines.includes("leftover-term"), "the TERM-handling leftover got no SIGTERM");
      // The one that ignores TERM is named in one warn line when it gets SIGKILL.
      assertMatch(
        status.stderr,
        /signal=SIGTERM[\s\S]*warn: SIGKILL to leftovers still running after 400ms: \d+ \(sleep\)\n/,
      );
      if (mode === "subreaper") {
        for (const pid of pids.slice(1)) assertOk(!exists(pid), `${pid}`);
      }
    } finally {
      await proc.stop();
      if (mode === "subreaper") cleanup(pids.slice(1));
    }
  });

  Deno.test(`${mode}: leftovers of a stopped child get SIGKILL when --grace ends, and the line says so`, async () => {
    // The child exits at TERM and leaves a process that ignores it; --grace (a stop is under
    // way) bounds the leftover, not --kill-after.
    const script = `trap 'exit 0' TERM; sh -c "trap '' TERM; echo left; exec sleep 60" & wait`;
    const proc = new Running(
      denitArgv(mode, ["--grace", "500ms", "--kill-after", "30s", "--", "sh", "-c", script]),
    );
    try {
      await proc.waitFor(/^left$/);
      killPid(denitPid(proc, mode), "SIGTERM");
      const status = await proc.status(15_000);
      assertEquals(status.code, 0, status.stderr);
      assertMatch(
        status.stderr,
        /warn: SIGKILL to leftovers still running at the end of the grace period \(500ms\): \d+ \(sleep\)\n/,
      );
    } finally {
      await proc.stop();
    }
  });

  Deno.test(`${mode}: --kill-after 0 SIGKILLs leftovers at once`, async () => {
    const script = `(trap '' TERM; exec sleep 60) & echo "pid $!"; exit 4`;
    const started = performance.now();
    const result = await run(
      denitArgv(mode, ["-v", "--kill-after", "0", "--", "sh", "-c", script]),
    );
    assertEquals(result.code, 4, result.stderr);
    assertOk(!/signal=SIGTERM/.test(result.stderr), "SIGTERM was sent with --kill-after 0");
    assertMatch(
      result.stderr,
      /warn: SIGKILL to leftovers still running at once \(--kill-after 0\): \d+ \((sh|sleep)\)\n/,
    );
    assertOk(performance.now() - started < 5000);
    if (mode === "subreaper") assertOk(!exists(Number(result.stdout.split(" ")[1])));
  });

  Deno.test(`${mode}: a child without leftovers exits without waiting`, async () => {
    const result = await run(denitArgv(mode, ["-v", "--kill-after", "30s", "true"]));
    assertEquals(result.code, 0);
    assertOk(!/SIGKILL/.test(result.stderr), result.stderr);
  });
}
