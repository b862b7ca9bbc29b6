/** Durations on the command line: "500ms", "10s", "1.5m", "2h", or a bare number of seconds. */

/** The longest duration accepted: timers overflow past 2^31-1 ms, and a day is plenty. */
export const MAX_DURATION_MS = 86_400_000;

const UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Parses a duration into milliseconds; throws RangeError naming the units otherwise. */
export function parseDuration(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (match === null) {
    throw new RangeError(
      `Invalid duration "${text}": use a number with ms, s, m or h, like "10s" (a bare number is seconds)`,
    );
  }
  const exact = Number(match[1]) * (UNITS[match[2] ?? "s"] ?? 1000);
  if (exact > 0 && exact < 1) {
    throw new RangeError(`Invalid duration "${text}": the shortest is 1ms`);
  }
  const ms = Math.round(exact);
  if (ms > MAX_DURATION_MS) throw new RangeError(`Invalid duration "${text}": at most 24h`);
  return ms;
}

/** "1.5s", "250ms", "2m": the shortest exact way to write a duration for people. */
export function formatDuration(ms: number): string {
  if (ms % 3_600_000 === 0 && ms > 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0 && ms > 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0 || ms >= 10_000) return `${ms / 1000}s`;
  return `${ms}ms`;
}
