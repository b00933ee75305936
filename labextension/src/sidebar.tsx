import { CommandRegistry } from '@lumino/commands';
import { Panel, Widget } from '@lumino/widgets';
import {
  CommandToolbarButton,
  LabIcon,
  ReactWidget,
  SidePanel,
  Toolbar,
  addIcon,
  copyIcon,
  deleteIcon,
  launchIcon,
  listIcon,
  pauseIcon,
  refreshIcon,
  runIcon,
  tableRowsIcon
} from '@jupyterlab/ui-components';
import React from 'react';

import {
  ICluster,
  IUsage,
  Phase,
  clusterKey,
  dashboardPath
} from './clusterApi';
import { useNow } from './clock';
import { CommandIDs } from './commandIds';
import { rayClusterIcon } from './icons';
import { ClusterListModel, IClusterListState } from './model';
import { IUser } from './profiles';
import {
  canConnect,
  canSuspend,
  cardFields,
  gpuHoursText,
  gpusText,
  idleSeconds,
  idleText,
  isWarned,
  phaseText,
  suspendedText
} from './render';

/** Run a command, on `cluster` when given (as `{name, namespace}`). */
type Run = (command: string, cluster?: ICluster) => Promise<void>;

/**
 * Run `run`'s commands on one cluster, at most one at a time: `busy` names
 * the one under way ("Deleting…"), for the buttons to say and to wait on.
 */
function useClusterActions(
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
          <dd>{value}</dd>
        </React.Fragment>
      ))}
    </dl>
  );
}

/**
 * An icon as inline SVG. Lighter than `LabIcon.react` (no hook, no
 * per-render style class), which matters at 200 cards × 7 buttons.
 */
function Icon(props: { icon: LabIcon }): React.ReactElement {
  return (
    <span
      className="jp-raylab-icon"
      aria-hidden="true"
      dangerouslySetInnerHTML={{ __html: props.icon.svgstr }}
    />
  );
}

function IconButton(props: {
  icon: LabIcon;
  label: string;
  onClick: () => void;
  disabled?: boolean;
  className?: string;
}): React.ReactElement {
  return (
    <button
      type="button"
      className={`jp-Button jp-mod-minimal jp-raylab-icon-button ${props.className ?? ''}`}
      title={props.label}
      aria-label={props.label}
      disabled={props.disabled}
      onClick={props.onClick}
    >
      <Icon icon={props.icon} />
    </button>
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
}

/**
 * One cluster: the fields and wording of the notebook status card
 * (`raylab/render.py`), and its actions.
 */
function ClusterCardView(props: ICardProps): React.ReactElement {
  const { cluster: c, run } = props;
  const [busy, act] = useClusterActions(c, run);
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
      <CardFields cluster={c} showOwner={props.showOwner} />
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

function RetryCountdown(props: { at: number }): React.ReactElement {
  const now = useNow(1000);
  const s = Math.max(0, Math.ceil((props.at - now) / 1000));
  return <>{s > 0 ? `Retrying in ${s} s.` : 'Retrying…'}</>;
}

function Banners(props: {
  state: IClusterListState;
  run: Run;
}): React.ReactElement | null {
  const { state } = props;
  const banners: React.ReactElement[] = [];
  if (state.stream === 'retrying') {
    banners.push(
      <div
        key="server"
        className="jp-raylab-banner jp-raylab-banner-error"
        role="alert"
      >
        <div>
          <strong>No live connection to the Jupyter server</strong>:{' '}
          {state.serverError}.{' '}
          {state.retryAt !== null && <RetryCountdown at={state.retryAt} />}
          {state.loaded && ' The list shows the last known state.'}
        </div>
        <button
          type="button"
          className="jp-Button jp-mod-styled jp-mod-reject"
          onClick={() => void props.run(CommandIDs.reconnect)}
        >
          Retry now
        </button>
      </div>
    );
  }
  if (!state.backendAvailable) {
    banners.push(
      <div
        key="backend"
        className="jp-raylab-banner jp-raylab-banner-warn"
        role="alert"
      >
        <div>
          <strong>The cluster backend is unreachable</strong>:{' '}
          {state.backendError ?? 'no reason given'}. The list shows the last
          known state and updates again by itself when the backend is back.
        </div>
      </div>
    );
  }
  return banners.length ? (
    <div className="jp-raylab-banners">{banners}</div>
  ) : null;
}

function EmptyState(props: { run: Run; showAll: boolean }): React.ReactElement {
  return (
    <div className="jp-raylab-empty">
      <p>
        {props.showAll
          ? 'Nobody has a Ray cluster.'
          : 'You have no Ray clusters.'}
      </p>
      <p>
        Create one here, or run <code>%raycluster up</code> in a notebook:
        clusters made anywhere show up in this panel.
      </p>
      <button
        type="button"
        className="jp-Button jp-mod-styled jp-mod-accept"
        onClick={() => void props.run(CommandIDs.create)}
      >
        New cluster
      </button>
    </div>
  );
}

type SortKey =
  'owner' | 'namespace' | 'name' | 'gpus' | 'phase' | 'idle' | 'hours';

/** The overview's columns; Namespace only where clusters have one (KubeRay). */
const COLUMNS: [SortKey, string][] = [
  ['owner', 'Owner'],
  ['namespace', 'Namespace'],
  ['name', 'Cluster'],
  ['gpus', 'GPUs'],
  ['phase', 'Status'],
  ['idle', 'Idle'],
  ['hours', 'GPU-h (7 d)']
];

/**
 * One overview row's actions: what an admin does to someone's cluster
 * (the commands reach clusters in other namespaces by their namespaced path).
 */
function OverviewActions(props: {
  cluster: ICluster;
  run: Run;
}): React.ReactElement {
  const { cluster: c, run } = props;
  const [busy, act] = useClusterActions(c, run);
  const deleting = c.phase === 'Deleting';
  const which = c.namespace ? `${c.name} in ${c.namespace}` : c.name;
  return (
    <div
      className="jp-raylab-overview-actions"
      role="group"
      aria-label={`Actions for ${which}`}
    >
      {dashboardPath(c) !== null && (
        <IconButton
          icon={launchIcon}
          label={`Open the Ray dashboard of ${which}`}
          disabled={!c.head_ready}
          onClick={act(CommandIDs.dashboard, 'Opening…')}
        />
      )}
      <IconButton
        icon={listIcon}
        label={`Show the log of ${which}`}
        onClick={act(CommandIDs.logs, 'Opening…')}
      />
      {canSuspend(c.phase) ? (
        <IconButton
          icon={pauseIcon}
          label={`Suspend ${which}`}
          disabled={busy !== null}
          onClick={act(CommandIDs.suspend, 'Suspending…')}
        />
      ) : (
        <IconButton
          icon={runIcon}
          label={`Resume ${which}`}
          disabled={deleting || busy !== null}
          onClick={act(CommandIDs.resume, 'Resuming…')}
        />
      )}
      <IconButton
        icon={deleteIcon}
        label={`Delete ${which}`}
        className="jp-raylab-delete"
        disabled={deleting || busy !== null}
        onClick={act(CommandIDs.remove, 'Deleting…')}
      />
    </div>
  );
}

/**
 * The admins' "All users" view: every cluster in one sortable table, idle
 * ones marked (sorted first by default: the ones worth a look), each with
 * its actions.
 */
function Overview(props: {
  clusters: ReadonlyArray<ICluster>;
  usage: IUsage | null;
  stale: boolean;
  run: Run;
}): React.ReactElement {
  const now = useNow(15000) / 1000;
  const [sort, setSort] = React.useState<{ key: SortKey; down: boolean }>({
    key: 'idle',
    down: true
  });
  const hours = (c: ICluster): number =>
    (c.uid && props.usage?.clusters[c.uid]) || 0;
  const value = (c: ICluster): string | number => {
    switch (sort.key) {
      case 'owner':
        return c.owner;
      case 'namespace':
        return c.namespace ?? '';
      case 'name':
        return c.name;
      case 'gpus':
        return c.gpus;
      case 'phase':
        return c.phase;
      case 'idle':
        return idleSeconds(c, now) ?? -1;
      case 'hours':
        return hours(c);
    }
  };
  const rows = [...props.clusters].sort((a, b) => {
    const x = value(a);
    const y = value(b);
    const order =
      x < y ? -1 : x > y ? 1 : clusterKey(a) < clusterKey(b) ? -1 : 1;
    return sort.down ? -order : order;
  });
  const namespaced = props.clusters.some(c => c.namespace !== null);
  const columns = COLUMNS.filter(([key]) => namespaced || key !== 'namespace');
  return (
    <table
      className={`jp-raylab-overview${props.stale ? ' jp-raylab-mod-stale' : ''}`}
      aria-label="Every user's clusters"
    >
      <thead>
        <tr>
          {columns.map(([key, label]) => (
            <th
              key={key}
              aria-sort={
                sort.key === key
                  ? sort.down
                    ? 'descending'
                    : 'ascending'
                  : 'none'
              }
            >
              <button
                type="button"
                className="jp-raylab-sort"
                onClick={() =>
                  setSort({
                    key,
                    down:
                      sort.key === key
                        ? !sort.down
                        : key !== 'owner' && key !== 'namespace'
                  })
                }
              >
                {label}
              </button>
            </th>
          ))}
          <th>Actions</th>
        </tr>
      </thead>
      <tbody>
        {rows.map(c => {
          const idle = idleText(c, now);
          const idleNow = idleSeconds(c, now) !== null;
          return (
            <tr
              key={clusterKey(c)}
              data-cluster={c.name}
              data-namespace={c.namespace ?? undefined}
              className={idleNow ? 'jp-raylab-mod-idle' : undefined}
            >
              <td>{c.owner}</td>
              {namespaced && <td>{c.namespace}</td>}
              <td>{c.name}</td>
              <td>{gpusText(c)}</td>
              <td title={phaseText(c)}>{c.phase}</td>
              <td>{idle}</td>
              <td>{gpuHoursText(hours(c))}</td>
              <td>
                <OverviewActions cluster={c} run={props.run} />
              </td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}

/** "This week: 12.5 GPU-h", for the user (or everyone, in the overview). */
function UsageLine(props: {
  usage: IUsage | null;
  all: boolean;
}): React.ReactElement | null {
  if (!props.usage) {
    return null;
  }
  const who = props.all ? 'All users this week' : 'This week';
  return (
    <div className="jp-raylab-usage" aria-live="polite">
      {who}: {gpuHoursText(props.usage.gpu_hours)}
    </div>
  );
}

function ClusterPanel(props: {
  model: ClusterListModel;
  user: IUser | null;
  run: Run;
  usage: IUsage | null;
}): React.ReactElement {
  const { model, run, user } = props;
  const state = React.useSyncExternalStore(
    React.useCallback(
      (notify: () => void) => {
        model.changed.connect(notify);
        return () => {
          model.changed.disconnect(notify);
        };
      },
      [model]
    ),
    () => model.state
  );
  const stale = state.stream !== 'open';
  const showOwner = state.showAll;
  return (
    <div className="jp-raylab-panel">
      {user?.admin && (
        <div
          className="jp-raylab-scope"
          role="radiogroup"
          aria-label="Whose clusters"
        >
          {[false, true].map(all => (
            <label key={String(all)}>
              <input
                type="radio"
                name="jp-raylab-scope"
                checked={state.showAll === all}
                onChange={() => model.setShowAll(all)}
              />{' '}
              {all ? 'All users' : 'Mine'}
            </label>
          ))}
        </div>
      )}
      <UsageLine usage={props.usage} all={state.showAll} />
      <Banners state={state} run={run} />
      {!state.loaded ? (
        state.stream === 'connecting' ? (
          <div className="jp-raylab-loading" aria-live="polite">
            Loading clusters…
          </div>
        ) : null
      ) : state.clusters.length === 0 ? (
        <EmptyState run={run} showAll={state.showAll} />
      ) : state.showAll ? (
        <Overview
          clusters={state.clusters}
          usage={props.usage}
          stale={stale}
          run={run}
        />
      ) : (
        <ul
          className="jp-raylab-cards"
          aria-label={
            stale ? 'Ray clusters (last known state)' : 'Ray clusters'
          }
        >
          {state.clusters.map(c => (
            <ClusterCard
              key={clusterKey(c)}
              cluster={c}
              showOwner={showOwner}
              stale={stale}
              run={run}
            />
          ))}
        </ul>
      )}
    </div>
  );
}

/** The sidebar's body: the cards, the overview and their banners. */
class ClusterListView extends ReactWidget {
  constructor(
    private readonly _model: ClusterListModel,
    private readonly _run: Run
  ) {
    super();
    this.addClass('jp-raylab-root');
  }

  user: IUser | null = null;
  usage: IUsage | null = null;

  protected render(): React.ReactElement {
    return (
      <ClusterPanel
        model={this._model}
        user={this.user}
        run={this._run}
        usage={this.usage}
      />
    );
  }
}

/**
 * The "Ray clusters" sidebar, made as JupyterLab's own side panels are (a
 * `SidePanel`: its title in the header, a toolbar of command buttons, then the
 * content), so it looks and behaves like the file browser's or the kernels'.
 */
export class ClusterSidebar extends SidePanel {
  constructor(
    readonly model: ClusterListModel,
    commands: CommandRegistry
  ) {
    super({ content: new Panel() });
    this.id = 'raylab-clusters';
    this.addClass('jp-raylab-sidebar');
    this.title.icon = rayClusterIcon;
    this.title.caption = 'Ray clusters';

    const heading = new Widget();
    const h2 = document.createElement('h2');
    h2.textContent = 'Ray clusters';
    h2.classList.add('jp-text-truncated');
    heading.node.appendChild(h2);
    this.header.addWidget(heading);

    this.toolbar.addItem(
      'new-cluster',
      new CommandToolbarButton({
        commands,
        id: CommandIDs.create,
        icon: addIcon,
        label: 'New cluster'
      })
    );
    this.toolbar.addItem('spacer', Toolbar.createSpacerItem());
    this.toolbar.addItem(
      'reconnect',
      new CommandToolbarButton({
        commands,
        id: CommandIDs.reconnect,
        icon: refreshIcon,
        label: ''
      })
    );

    this._list = new ClusterListView(model, async (command, cluster) => {
      await commands.execute(
        command,
        cluster === undefined
          ? {}
          : { name: cluster.name, namespace: cluster.namespace }
      );
    });
    this.addWidget(this._list);
  }

  /** Who the server says the user is (admins get the mine/all toggle). */
  get user(): IUser | null {
    return this._list.user;
  }
  set user(user: IUser | null) {
    this._list.user = user;
    this._list.update();
  }

  /** GPU-hours shown in the header and the overview (`GET usage`). */
  get usage(): IUsage | null {
    return this._list.usage;
  }
  set usage(usage: IUsage | null) {
    this._list.usage = usage;
    this._list.update();
  }

  private readonly _list: ClusterListView;
}
