/**
 * Who the OOM killer picks with jobs on, under Docker: ROUNDS containers of 64 MiB (no swap) with
 * the health endpoint and the job service, a job running (started by a client inside the
 * container, `docker exec ... /denit job run`, or outside, through the socket's bind-mounted
 * directory, alternately), then a child that allocates until the kernel ends something. A round
 * is denit's if the container exits 137 with denit's `cause=oom` line; PID 1 killed leaves no
 * line. Prints one line per round and the tally. Needs root, dockerd and `make rootfs`.
 *
 *   deno run -A --no-config bench/oom_jobs.ts [ROUNDS]
 */

import {
  containerName,
  engine,
  images,
  must,
  remove,
  TEST_IMAGE,
} from "../tests/container/engines.ts";
import { DENIT } from "../tests/helpers.ts";

const ROUNDS = Number(Deno.args[0] ?? "50");
const JOB = ["/fixtures/signal_echo"];

async function round(n: number, inside: boolean): Promise<string> {
  const name = containerName("oom-jobs");
  const dir = await Deno.makeTempDir({ prefix: "denit-oom-jobs-" });
  try {
    await must("docker", [
      "run",
      "-d",
      "--name",
      name,
      "--network",
      "none",
      "--memory",
      "64m",
      "--memory-swap",
      "64m",
      "-e",
      "DENIT_HEALTH_ADDR=127.0.0.1:7623",
      "-e",
      "DENIT_JOBS_SOCKET=/run/denit/jobs.sock",
      "-v",
      `${dir}:/run/denit`,
      TEST_IMAGE,
      "/hog",
      "/run/denit/go",
    ]);
    while (!(await Array.fromAsync(Deno.readDir(dir))).some((e) => e.name === "jobs.sock")) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const client = inside
      ? ["docker", "exec", name, "/denit", "job", "run", "--id", "j", "--", ...JOB]
      : [...DENIT, "job", "--socket", `${dir}/jobs.sock`, "run", "--id", "j", "--", ...JOB];
    const [program = "", ...args] = client;
    const job = await new Deno.Command(program, { args, stdout: "piped", stderr: "piped" })
      .output();
    const started = job.code === 0 ? "job" : `job-${job.code}`;
    await Deno.writeTextFile(`${dir}/go`, "");
    await must("docker", ["wait", name]);
    const inspect = await must("docker", [
      "inspect",
      "-f",
      "{{.State.ExitCode}} {{.State.OOMKilled}}",
      name,
    ]);
    const logs = await engine("docker", ["logs", name]);
    const said = /cause=(\w+)/.exec(logs.stderr)?.[1] ?? "none";
    const service = /the job service was killed by the kernel's OOM killer/.test(logs.stderr);
    const line = `${n} ${inside ? "inside " : "outside"} ${started} exit=${inspect.trim()} ` +
      `cause=${said}${service ? " service-oom" : ""}`;
    return line;
  } finally {
    await remove("docker", [name]);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

await images("docker");
const lines: string[] = [];
for (let n = 1; n <= ROUNDS; n++) {
  const line = await round(n, n % 2 === 1);
  lines.push(line);
  // deno-lint-ignore no-console -- the report
  console.log(line);
}
// PID 1 killed leaves no line of denit's: every round with a cause line is one denit lived.
const lived = lines.filter((line) => !line.endsWith("cause=none")).length;
const oom = lines.filter((line) => /exit=137 .*cause=oom/.test(line)).length;
// deno-lint-ignore no-console -- the report
console.log(`PID 1 lived in ${lived} of ${ROUNDS} rounds and said cause=oom in ${oom}`);
