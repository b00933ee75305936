import { CommandRegistry } from '@lumino/commands';
import type { Message } from '@lumino/messaging';
import { Panel, Widget } from '@lumino/widgets';
import {
  CommandToolbarButton,
  ReactWidget,
  SidePanel,
  Toolbar,
  addIcon,
  refreshIcon
} from '@jupyterlab/ui-components';
import React from 'react';

import { ClusterCard } from './card';
import { ICluster, IUsage, clusterKey } from './clusterApi';
import { useNow } from './clock';
import { CommandIDs, Run } from './commandIds';
import { rayClusterIcon } from './icons';
import { JobWatcher } from './jobWatch';
import { ClusterListModel, IClusterListState } from './model';
import { Overview } from './overview';
import { IUser } from './profiles';
import { gpuHoursText } from './render';
import { IServeReader } from './serveOpen';

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
  jobs: JobWatcher | null;
  opened: number;
  onOpen: ((cluster: ICluster) => void) | null;
  serve: IServeReader | null;
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
              jobs={props.jobs}
              opened={props.opened}
              onOpen={props.onOpen}
              serve={props.serve}
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
  jobs: JobWatcher | null = null;
  /** Counts the sidebar's openings; 0 while it is hidden. */
  opened = 0;
  onOpen: ((cluster: ICluster) => void) | null = null;
  serve: IServeReader | null = null;

  protected render(): React.ReactElement {
    return (
      <ClusterPanel
        model={this._model}
        user={this.user}
        run={this._run}
        usage={this.usage}
        jobs={this.jobs}
        opened={this.opened}
        onOpen={this.onOpen}
        serve={this.serve}
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

    this._list = new ClusterListView(model, async (command, cluster, args) => {
      await commands.execute(
        command,
        cluster === undefined
          ? {}
          : { ...args, name: cluster.name, namespace: cluster.namespace }
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

  /**
   * The jobs of the user's Ready clusters, on their cards (where the server
   * has the job API): fetched while the sidebar is attached, and disposed
   * with it.
   */
  get jobs(): JobWatcher | null {
    return this._list.jobs;
  }
  set jobs(watcher: JobWatcher | null) {
    if (watcher === this._list.jobs) {
      return;
    }
    this._list.jobs?.dispose();
    this._list.jobs = watcher;
    if (watcher && this.isAttached) {
      watcher.start();
    }
    this._list.update();
  }

  /**
   * What a card calls when it is opened (`gpuUseOnOpen`: its GPU use read
   * again); null where the server has no such read.
   */
  get onCardOpen(): ((cluster: ICluster) => void) | null {
    return this._list.onOpen;
  }
  set onCardOpen(onOpen: ((cluster: ICluster) => void) | null) {
    this._list.onOpen = onOpen;
    this._list.update();
  }

  /**
   * What an opened card reads its Serve apps with (`serveReader`), for its
   * list of apps; null where the server has no such read.
   */
  get serveApps(): IServeReader | null {
    return this._list.serve;
  }
  set serveApps(reader: IServeReader | null) {
    this._list.serve = reader;
    this._list.update();
  }

  override dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._list.jobs?.dispose();
    super.dispose();
  }

  protected override onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._list.jobs?.start();
    this._setOpen(this.isVisible);
  }

  protected override onBeforeDetach(msg: Message): void {
    this._list.jobs?.stop();
    this._setOpen(false);
    super.onBeforeDetach(msg);
  }

  protected override onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._setOpen(true);
  }

  protected override onBeforeHide(msg: Message): void {
    this._setOpen(false);
    super.onBeforeHide(msg);
  }

  /** The user opened (or closed) the sidebar: its cards are opened with it. */
  private _setOpen(open: boolean): void {
    const opened = open ? ++this._openings : 0;
    if (opened !== this._list.opened) {
      this._list.opened = opened;
      this._list.update();
    }
  }

  private _openings = 0;

  private readonly _list: ClusterListView;
}
