/** bench/chart.svg: denit against the C inits and the Deno floor, one panel per figure. */

import { type Figures, SUPERVISORS } from "./report.ts";

interface Panel {
  title: string;
  unit: string;
  better: "lower" | "higher";
  bars: Array<[string, number]>;
}

const COLORS: Record<string, string> = {
  tini: "#7f8c8d",
  "dumb-init": "#95a5a6",
  catatonit: "#b2bec3",
  denit: "#2e86de",
  "Deno floor": "#f39c12",
};

function escape(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;");
}

function panels(f: Figures): Panel[] {
  const sups = SUPERVISORS;
  const pick = <K extends string>(
    source: Record<(typeof SUPERVISORS)[number] | K, number>,
    floorKey: K,
    scale = 1,
  ): Array<[string, number]> => [
    ...sups.map((n): [string, number] => [n, source[n] / scale]),
    ["Deno floor", source[floorKey] / scale],
  ];
  return [
    {
      title: "Start overhead",
      unit: "ms",
      better: "lower",
      bars: pick(f.start.overheadUs, "floorSpawn", 1000),
    },
    {
      title: "Resident memory",
      unit: "MiB",
      better: "lower",
      bars: pick(f.memory.rssKiB, "floorSpawn", 1024),
    },
    {
      title: "Signal forwarding (median)",
      unit: "µs",
      better: "lower",
      bars: pick(
        {
          tini: f.signals.tini.medianUs,
          "dumb-init": f.signals["dumb-init"].medianUs,
          catatonit: f.signals.catatonit.medianUs,
          denit: f.signals.denit.medianUs,
          floor: f.signals.floor.medianUs,
        },
        "floor",
      ),
    },
    {
      title: "Reaping (burst)",
      unit: "zombies/s",
      better: "higher",
      bars: sups.map((n): [string, number] => [n, f.reaping[n].perSecond]),
    },
    { title: "Exit propagation", unit: "ms", better: "lower", bars: pick(f.exit, "floor", 1000) },
  ];
}

/** The SVG text. */
export function renderChart(f: Figures): string {
  const width = 980, panelWidth = 180, top = 60, barHeight = 22, gap = 6, left = 20;
  const list = panels(f);
  const height = top + 5 * (barHeight + gap) + 60;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${left}" y="22" font-size="15" font-weight="bold">denit vs tini, dumb-init, catatonit and the Deno floor (${
      escape(f.machine.date)
    }, ${escape(f.machine.commit)})</text>`,
  ];
  list.forEach((panel, i) => {
    const x0 = left + i * (panelWidth + 12);
    const max = Math.max(...panel.bars.map(([, v]) => (Number.isFinite(v) ? v : 0)), 1e-9);
    parts.push(`<text x="${x0}" y="${top - 16}" font-weight="bold">${escape(panel.title)}</text>`);
    parts.push(
      `<text x="${x0}" y="${top - 4}" fill="#555">${
        escape(panel.unit)
      }, ${panel.better} is better</text>`,
    );
    panel.bars.forEach(([name, value], j) => {
      const y = top + j * (barHeight + gap);
      const w = Number.isFinite(value) ? Math.max(1, (value / max) * (panelWidth - 60)) : 0;
      parts.push(
        `<rect x="${x0}" y="${y}" width="${w.toFixed(1)}" height="${barHeight}" fill="${
          COLORS[name] ?? "#999"
        }"/>`,
      );
      const label = Number.isFinite(value)
        ? (value >= 100 ? value.toFixed(0) : value.toFixed(2))
        : "-";
      parts.push(`<text x="${(x0 + w + 4).toFixed(1)}" y="${y + 15}">${label}</text>`);
    });
  });
  const legendY = top + 5 * (barHeight + gap) + 25;
  Object.entries(COLORS).forEach(([name, color], i) => {
    const x = left + i * 150;
    parts.push(`<rect x="${x}" y="${legendY}" width="14" height="14" fill="${color}"/>`);
    parts.push(`<text x="${x + 20}" y="${legendY + 11}">${escape(name)}</text>`);
  });
  parts.push("</svg>");
  return `${parts.join("\n")}\n`;
}
