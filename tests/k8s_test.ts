/**
 * The Kubernetes examples are valid Pods (the kubernetes-models JSON schemas, from npm) and
 * agree with denit: its flags parse, probes point at the health port, grace periods fit.
 */

import { Pod } from "kubernetes-models/v1";
import { parse } from "yaml";
import { assertEquals, assertOk } from "./assert.ts";
import { DOCUMENTATION, FIXTURES } from "./helpers.ts";
import { signalName } from "../src/common/signals.ts";
import { parseInvocation } from "../src/supervise/cli.ts";
import { parseCopyInvocation } from "../src/copy/cli.ts";
import { ABANDON_MS } from "../src/supervise/machine.ts";
import { DEFAULT_TERMINATION_LOG } from "../src/supervise/termination.ts";

interface ContainerShape {
  name: string;
  command?: string[];
  args?: string[];
  ports?: Array<{ name?: string; containerPort: number }>;
  livenessProbe?: { httpGet?: { path: string; port: number | string } };
  readinessProbe?: { httpGet?: { path: string; port: number | string } };
  terminationMessagePath?: string;
  volumeMounts?: Array<{ name: string; mountPath: string }>;
  restartPolicy?: string;
  lifecycle?: { stopSignal?: string; preStop?: { sleep?: { seconds: number } } };
}

const files = [...Deno.readDirSync(`${FIXTURES}/k8s`)].map((e) => e.name).filter((n) =>
  n.endsWith(".yaml")
);

Deno.test("there are four Kubernetes examples", () => {
  assertEquals(files.sort(), [
    "pod-arc-runner.yaml",
    "pod-entrypoint.yaml",
    "pod-image-volume.yaml",
    "pod-init-container.yaml",
  ]);
});

interface PodSpec {
  terminationGracePeriodSeconds?: number;
  initContainers?: ContainerShape[];
  containers: ContainerShape[];
  volumes?: Array<{ name: string; emptyDir?: unknown; image?: { reference: string } }>;
}

/** The signals every denit treats as a stop without --stop-signal. */
const STOPS = ["SIGTERM", "SIGINT", "SIGQUIT"];

/**
 * A valid Pod whose denit usage is consistent. `requireDenit`: every container runs denit (the
 * fixtures); otherwise containers without a command (an image's ENTRYPOINT) are only validated.
 */
function checkPod(doc: Record<string, unknown>, requireDenit: boolean): void {
  new Pod(doc).validate(); // throws with the schema's reasons if the object is not a Pod
  const spec = doc.spec as PodSpec;
  const sidecars = (spec.initContainers ?? []).filter((c) => c.restartPolicy === "Always");
  for (const init of spec.initContainers ?? []) {
    if (init.restartPolicy === "Always") continue;
    const argv = [...(init.command ?? []), ...(init.args ?? [])];
    assertEquals(argv[1], "init", `${init.name} runs denit init`);
    const parsed = parseCopyInvocation(argv.slice(1));
    assertOk(parsed !== "help");
    const mount = init.volumeMounts?.find((m) => m.mountPath === parsed.dest);
    assertOk(mount !== undefined, `${init.name}: DEST is not a mounted volume`);
    assertOk(spec.volumes?.find((v) => v.name === mount.name)?.emptyDir !== undefined);
  }
  for (const container of [...spec.containers, ...sidecars]) {
    const argv = [...(container.command ?? []), ...(container.args ?? [])];
    if (argv.length === 0 && !requireDenit) continue;
    const exe = argv[0] ?? "";
    assertOk(exe.endsWith("/denit"), `${container.name} runs denit`);
    const invocation = parseInvocation(argv.slice(1), {});
    assertEquals(invocation.kind, "run");
    if (invocation.kind !== "run") return;
    const { config } = invocation;
    if (config.graceMs !== null) {
      // The README's stop budget: preStop sleep + delay + grace + ABANDON_MS, a second to spare.
      const sleep = (container.lifecycle?.preStop?.sleep?.seconds ?? 0) * 1000;
      const budget = sleep + config.shutdownDelayMs + config.graceMs + ABANDON_MS + 1000;
      assertOk(
        (spec.terminationGracePeriodSeconds ?? 30) * 1000 >= budget,
        `${container.name}: terminationGracePeriodSeconds must cover ${budget} ms`,
      );
    }
    // The pod's stop signal must be one denit treats as a stop.
    const stopSignal = container.lifecycle?.stopSignal;
    if (stopSignal !== undefined && !STOPS.includes(stopSignal)) {
      assertOk(
        config.stopSignal !== null && signalName(config.stopSignal) === stopSignal,
        `${container.name}: lifecycle.stopSignal ${stopSignal} needs --stop-signal ${stopSignal}`,
      );
    }
    if (sidecars.includes(container)) {
      // Stopped after the app: a delay only eats the time left; its SIGTERM end is a success.
      assertEquals(
        config.shutdownDelayMs,
        0,
        `${container.name}: no --shutdown-delay in a sidecar`,
      );
      assertOk(config.remapExit.has(143), `${container.name}: a sidecar wants -e 143`);
    }
    // denit's termination message goes where the kubelet reads it.
    const messagePath = container.terminationMessagePath ?? DEFAULT_TERMINATION_LOG;
    assertEquals(config.terminationLog ?? DEFAULT_TERMINATION_LOG, messagePath);
    const appPorts = (container.ports ?? []).filter((p) => p.containerPort !== config.health?.port);
    if (appPorts.length > 0) {
      const check = config.readyWhen;
      assertOk(
        check !== null && (check.kind === "tcp" || check.kind === "http") &&
          appPorts.some((p) => p.containerPort === check.port),
        `${container.name} has an app port: --ready-when should check it`,
      );
    }
    for (const probe of [container.livenessProbe, container.readinessProbe]) {
      if (probe?.httpGet === undefined) continue;
      assertOk(
        config.health !== null,
        `${container.name} probes a health endpoint denit does not serve`,
      );
      const port = typeof probe.httpGet.port === "number"
        ? probe.httpGet.port
        : container.ports?.find((p) => p.name === probe.httpGet?.port)?.containerPort;
      assertEquals(port, config.health.port, `${container.name}: probe port`);
      assertOk(["/healthz", "/livez", "/readyz"].includes(probe.httpGet.path));
    }
    if (exe !== "/denit") {
      // A copied denit: on a volume an init container filled, or denit's image as a volume.
      const mount = container.volumeMounts?.find((m) => exe.startsWith(`${m.mountPath}/`));
      assertOk(mount !== undefined, `${exe} is on no volume`);
      const image = spec.volumes?.find((v) => v.name === mount.name)?.image;
      assertOk(
        image?.reference.includes("denit") ||
          (spec.initContainers ?? []).some((init) =>
            init.volumeMounts?.some((m) => m.name === mount.name)
          ),
        `${exe}: its volume is neither denit's image nor filled by an init container`,
      );
    }
  }
}

for (const file of files) {
  Deno.test(`k8s ${file}: a valid Pod whose denit usage is consistent`, () => {
    checkPod(parse(Deno.readTextFileSync(`${FIXTURES}/k8s/${file}`)), true);
  });
}

Deno.test("the documentation's Pods are valid and use denit consistently", () => {
  const blocks = [...DOCUMENTATION.values()]
    .flatMap((text) => [...text.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1] ?? ""));
  const pods = blocks.map((text) => parse(text)).filter((doc) => doc?.kind === "Pod");
  assertOk(pods.length >= 5, `${pods.length} Pods in the documentation`);
  for (const pod of pods) checkPod(pod, false);
});
