import {
  copyIcon,
  deleteIcon,
  launchIcon,
  listIcon,
  pauseIcon,
  runIcon,
  tableRowsIcon
} from '@jupyterlab/ui-components';
import React from 'react';

import { ICluster, Phase, dashboardPath } from './clusterApi';
import { useNow } from './clock';
import { CommandIDs, Run } from './commandIds';
import { readsGpuUseOnOpen } from './gpuOpen';
import { GpuSparkline } from './gpuSparkline';
import { IconButton } from './iconButton';
import { JobsSection } from './jobs';
import { JobWatcher } from './jobWatch';
import {
  canConnect,
  canSuspend,
  cardFields,
  idleText,
  isWarned,
  phaseText,
  suspendedText
} from './render';
import { ServeAppsSection, useServeApps } from './serveApps';
import { IServeReader } from './serveOpen';

/**
 * Run `run`'s commands on one cluster, at most one at a time: `busy` names
 * the one under way ("Deleting…"), for the buttons to say and to wait on.
 */
export function useClusterActions(
  cluster: ICluster,
  run: Run
): [string | null, (command: string, label: string) => () => void] {
  const [busy, setBusy] = React.useState<string | null>(null);
  const act = (command: string, label: string) => (): void => {
    setBusy(label);
    void run(command, cluster).finally(() => setBusy(null));
  };
  return [busy, act];
}

/** A DOM id's part for the cluster (`_` is in no namespace or name). */
function domId(cluster: ICluster): string {
  return cluster.namespace
    ? `${cluster.namespace}_${cluster.name}`
    : cluster.name;
}

const PHASE_CLASS: Record<Phase, string> = {
  Queued: 'jp-raylab-phase-queued',
  Pending: 'jp-raylab-phase-pending',
  Starting: 'jp-raylab-phase-starting',
  Ready: 'jp-raylab-phase-ready',
  Degraded: 'jp-raylab-phase-degraded',
  Suspended: 'jp-raylab-phase-suspended',
  Failed: 'jp-raylab-phase-failed',
  Deleting: 'jp-raylab-phase-deleting'
};

/** Rows the card shows elsewhere: the phase in its header, idleness beside Keep running. */
const SHOWN_ELSEWHERE = new Set(['Phase', 'Idle']);

/**
 * The card's rows (`cardFields`, the notebook card's rows), refreshed by the
 * shared clock: only this list re-renders as the age moves, not the card.
 * The GPU use row also draws the last hour's line.
 */
function CardFields(props: {
  cluster: ICluster;
  showOwner: boolean;
}): React.ReactElement {
  const now = useNow(5000);
  const rows = cardFields(props.cluster, now / 1000, {
    withOwner: props.showOwner
  }).filter(([key]) => !SHOWN_ELSEWHERE.has(key));
  return (
    <dl className="jp-raylab-card-fields">
      {rows.map(([key, value]) => (
        <React.Fragment key={key}>
          <dt>{key}</dt>
          {key === 'GPU use' ? (
            <dd className="jp-raylab-gpu-use">
              <span>{value}</span>
              <GpuSparkline use={props.cluster.gpu_use} />
            </dd>
          ) : (
            <dd>{value}</dd>
          )}
        </React.Fragment>
      ))}
    </dl>
  );
}

/**
 * "idle for 50 min; suspends at 14:05" with Keep running once warned, or
 * "activity unknown since …" (the same words as `%raycluster status`).
 */
function IdleLine(props: {
  cluster: ICluster;
  busy: boolean;
  onKeep: () => void;
}): React.ReactElement | null {
  const now = useNow(15000);
  const c = props.cluster;
  const text = c.phase === 'Suspended' ? '' : idleText(c, now / 1000);
  if (!text) {
    return null;
  }
  const warned = isWarned(c);
  return (
    <div
      className={`jp-raylab-card-idle${warned ? ' jp-raylab-mod-warned' : ''}`}
      role={warned ? 'status' : undefined}
    >
      <span>{text}</span>
      {warned && (
        <button
          type="button"
          className="jp-Button jp-mod-styled jp-mod-warn jp-raylab-keep"
          disabled={props.busy}
          aria-label={`Keep ${c.name} running`}
          onClick={props.onKeep}
        >
          Keep running
        </button>
      )}
    </div>
  );
}

interface ICardProps {
  cluster: ICluster;
  showOwner: boolean;
  stale: boolean;
  run: Run;
  /** Where its jobs come from; null where the server has no job API. */
  jobs: JobWatcher | null;
  /**
   * Counts the sidebar's openings (0 while it is hidden): each time the card
   * is opened (shown, or made readable while shown), `onOpen` gets it.
   */
  opened?: number;
  /** Read its GPU use again (`gpuUseOnOpen`); null where the server cannot. */
  onOpen?: ((cluster: ICluster) => void) | null;
  /** Read its Serve apps while opened (`serveReader`); null where the server cannot. */
  serve?: IServeReader | null;
}

/**
 * Call `onOpen` once each time the card is opened: the sidebar shown with it,
 * or the cluster becoming readable (running, with GPUs) while it is shown.
 * Not on every change of the cluster, which the event stream brings anyway.
 */
function useOnOpen(
  cluster: ICluster,
  opened: number,
  onOpen: ((cluster: ICluster) => void) | null
): void {
  const latest = React.useRef(cluster);
  latest.current = cluster;
  const readable = readsGpuUseOnOpen(cluster);
  React.useEffect(() => {
    if (opened > 0 && readable && onOpen) {
      onOpen(latest.current);
    }
  }, [opened, readable, onOpen]);
}

/**
 * One cluster: the fields and wording of the notebook status card
 * (`raylab/display/render.py`), and its actions.
 */
function ClusterCardView(props: ICardProps): React.ReactElement {
  const { cluster: c, run } = props;
  const [busy, act] = useClusterActions(c, run);
  useOnOpen(c, props.opened ?? 0, props.onOpen ?? null);
  const serve = useServeApps(c, props.opened ?? 0, props.serve ?? null);
  // The Serve row says what the list below it shows: the newest reading.
  const shown = serve === (c.serve ?? null) ? c : { ...c, serve };
  const deleting = c.phase === 'Deleting';
  const connectable = canConnect(c);
  const phase = phaseText(c);
  const reason = suspendedText(c) || c.reason;
  const titleId = `jp-raylab-card-${domId(c)}`;
  return (
    <li
      className={`jp-raylab-card${props.stale ? ' jp-raylab-mod-stale' : ''}`}
      data-cluster={c.name}
      data-namespace={c.namespace ?? undefined}
      data-phase={c.phase}
      aria-labelledby={titleId}
    >
      <div className="jp-raylab-card-header">
        <span id={titleId} className="jp-raylab-card-name">
          {c.name}
        </span>
        <span
          className={`jp-raylab-phase ${PHASE_CLASS[c.phase] ?? ''}`}
          title={phase}
        >
          {c.phase}
        </span>
      </div>
      {reason && (
        <div className="jp-raylab-card-reason" title={phase}>
          {reason}
        </div>
      )}
      <IdleLine
        cluster={c}
        busy={busy !== null}
        onKeep={act(CommandIDs.keepRunning, 'Keeping…')}
      />
      <CardFields cluster={shown} showOwner={props.showOwner} />
      {c.phase === 'Ready' && props.jobs && (
        <JobsSection cluster={c} watcher={props.jobs} run={run} />
      )}
      {props.serve && (
        <ServeAppsSection cluster={c} serve={serve} url={props.serve.url} />
      )}
      <div
        className="jp-raylab-card-actions"
        role="group"
        aria-label={`Actions for ${c.name}`}
      >
        <div className="jp-raylab-card-primary">
          <button
            type="button"
            className="jp-Button jp-mod-styled jp-mod-accept jp-raylab-connect"
            disabled={!connectable || busy !== null}
            title={
              connectable
                ? `Connect the active notebook's kernel to ${c.name}`
                : `${c.name} is ${c.phase}; connect once its head is ready`
            }
            aria-label={`Connect notebook to ${c.name}`}
            onClick={act(CommandIDs.connect, 'Connecting…')}
          >
            {busy ?? 'Connect to notebook'}
          </button>
          <IconButton
            icon={copyIcon}
            label={`Copy code that connects to ${c.name}`}
            onClick={act(CommandIDs.copyCode, 'Copying…')}
          />
        </div>
        <div className="jp-raylab-card-secondary">
          {dashboardPath(c) !== null && (
            <IconButton
              icon={launchIcon}
              label={`Open the Ray dashboard of ${c.name}`}
              disabled={!c.head_ready}
              onClick={act(CommandIDs.dashboard, 'Opening…')}
            />
          )}
          <IconButton
            icon={listIcon}
            label={`Show the log of ${c.name}`}
            onClick={act(CommandIDs.logs, 'Opening…')}
          />
          <IconButton
            icon={tableRowsIcon}
            label={`Scale ${c.name}`}
            disabled={deleting || busy !== null}
            onClick={act(CommandIDs.scale, 'Scaling…')}
          />
          {canSuspend(c.phase) ? (
            <IconButton
              icon={pauseIcon}
              label={`Suspend ${c.name}`}
              disabled={busy !== null}
              onClick={act(CommandIDs.suspend, 'Suspending…')}
            />
          ) : (
            <IconButton
              icon={runIcon}
              label={`Resume ${c.name}`}
              disabled={deleting || busy !== null}
              onClick={act(CommandIDs.resume, 'Resuming…')}
            />
          )}
          <IconButton
            icon={deleteIcon}
            label={`Delete ${c.name}`}
            className="jp-raylab-delete"
            disabled={deleting || busy !== null}
            onClick={act(CommandIDs.remove, 'Deleting…')}
          />
        </div>
      </div>
    </li>
  );
}

export const ClusterCard = React.memo(ClusterCardView);
