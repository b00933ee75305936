import React from 'react';

import type { IGpuUse } from './clusterApi';
import { clockText, gpuMeasured, roundHalfUp } from './render';

const WIDTH = 80;
const HEIGHT = 16;
// Room for the stroke, so that 0 % and 100 % are not clipped by the edges.
const PAD = 1;
const HOUR_S = 3600;

/**
 * The polyline's points: the last hour ending at the latest reading, 0–100 %
 * bottom to top. The time axis is the whole hour, not the readings' span, so a
 * cluster read for five minutes draws a short line at the right.
 */
function sparklinePoints(history: ReadonlyArray<[number, number]>): string {
  const last = history[history.length - 1][0];
  return history
    .map(([at, percent]) => {
      const x = Math.max(0, WIDTH * (1 - (last - at) / HOUR_S));
      const share = Math.min(100, Math.max(0, percent)) / 100;
      const y = PAD + (HEIGHT - 2 * PAD) * (1 - share);
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
}

/**
 * The last hour of a cluster's mean GPU utilization, beside its "GPU use"
 * row. Nothing when not measured (no line at 0 % for what nobody read) or
 * when there is no line yet (fewer than two readings).
 */
function GpuSparklineView(props: {
  use: IGpuUse | null | undefined;
}): React.ReactElement | null {
  const use = props.use;
  if (!use || !gpuMeasured(use) || use.history.length < 2) {
    return null;
  }
  const [at, percent] = use.history[use.history.length - 1];
  return (
    <svg
      className="jp-raylab-gpu-sparkline"
      width={WIDTH}
      height={HEIGHT}
      viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
      role="img"
      aria-label="GPU use, last hour"
    >
      <title>{`GPU use ${roundHalfUp(percent)}% at ${clockText(at)}`}</title>
      <polyline points={sparklinePoints(use.history)} />
    </svg>
  );
}

// Memoized on the reading: the card's rows re-render every 5 s for the age,
// the history only changes with a new reading.
export const GpuSparkline = React.memo(GpuSparklineView);
