import { Clipboard, Notification } from '@jupyterlab/apputils';
import { copyIcon, launchIcon } from '@jupyterlab/ui-components';
import { Poll } from '@lumino/polling';
import React from 'react';

import { ICluster, IServeApp, IServeApps } from './clusterApi';
import { IconButton } from './iconButton';
import { SERVE_FAILED } from './render';
import { IServeReader, newestServe, readsServeAppsOnOpen } from './serveOpen';

/**
 * The cluster's Serve apps as an opened card shows them: read when the card
 * is opened (`opened` > 0) and every `reader.periodMs` while it stays open and
 * the page is visible (longer after a failed read), the newer of that and the
 * event stream's `cluster.serve`. A failed read is left unsaid: the card keeps
 * what it knew. No reader (an older server): the event stream's only.
 */
export function useServeApps(
  cluster: ICluster,
  opened: number,
  reader: IServeReader | null
): IServeApps | null {
  const [read, setRead] = React.useState<IServeApps | null>(null);
  const latest = React.useRef(cluster);
  latest.current = cluster;
  const readable = readsServeAppsOnOpen(cluster);
  React.useEffect(() => {
    if (opened === 0 || !readable || !reader) {
      return;
    }
    const poll = new Poll({
      name: `raylab:serve:${cluster.name}`,
      factory: async () => {
        const reply = reader.read(latest.current);
        if (reply) {
          setRead(await reply);
        }
      },
      frequency: {
        interval: reader.periodMs,
        backoff: true,
        max: 6 * reader.periodMs
      },
      standby: 'when-hidden',
      auto: false
    });
    void poll.start();
    return () => poll.dispose();
  }, [opened, readable, reader, cluster.name]);
  return readable ? newestServe(cluster.serve, read) : (cluster.serve ?? null);
}

/** "Running", "Deploy failed": Serve's status in words. */
export function serveStatusText(status: string): string {
  const words = status.toLowerCase().replace(/_/g, ' ');
  return words.charAt(0).toUpperCase() + words.slice(1);
}

function statusClass(status: string): string {
  if (status === 'RUNNING') {
    return 'jp-raylab-serve-running';
  }
  return SERVE_FAILED.has(status)
    ? 'jp-raylab-serve-failed'
    : 'jp-raylab-serve-changing';
}

function ServeAppRow(props: {
  app: IServeApp;
  url: (path: string) => string;
}): React.ReactElement {
  const { app } = props;
  const open = (): void => {
    window.open(props.url(app.path), '_blank', 'noopener');
  };
  const copy = (): void => {
    const url = props.url(app.path);
    Clipboard.copyToSystem(url);
    Notification.success(`Copied the URL of Serve app ${app.name}: ${url}`, {
      autoClose: 3000
    });
  };
  return (
    <li
      className="jp-raylab-serve-app"
      data-app={app.name}
      data-status={app.status}
    >
      <div className="jp-raylab-serve-app-line">
        <span className="jp-raylab-serve-app-name" title={app.name}>
          {app.name}
        </span>
        <span
          className={`jp-raylab-serve-app-state ${statusClass(app.status)}`}
          title={app.message || undefined}
        >
          {serveStatusText(app.status)}
        </span>
        <span
          className="jp-raylab-serve-app-replicas"
          title={`${app.running_replicas} of ${app.replicas} replicas running`}
        >
          {app.running_replicas}/{app.replicas}
        </span>
      </div>
      <div className="jp-raylab-serve-app-line">
        <code
          className="jp-raylab-serve-app-route"
          title={
            app.in_cluster_url
              ? `In the cluster: ${app.in_cluster_url}`
              : 'No HTTP route: reached through its handle only'
          }
        >
          {app.route ?? 'no route'}
        </code>
        {app.path && (
          <>
            <IconButton
              icon={launchIcon}
              label={`Open Serve app ${app.name} in a new tab`}
              onClick={open}
            />
            <IconButton
              icon={copyIcon}
              label={`Copy the URL of Serve app ${app.name}`}
              onClick={copy}
            />
          </>
        )}
      </div>
    </li>
  );
}

/**
 * A running cluster's Serve apps on its opened card: name, status, replicas
 * running of all, route, and Open / Copy URL through Jupyter's proxy (apps
 * with a route). Nothing while Serve was not started or lists no app; the
 * card's Serve row says so, and why it is unknown.
 */
export function ServeAppsSection(props: {
  cluster: ICluster;
  serve: IServeApps | null;
  url: (path: string) => string;
}): React.ReactElement | null {
  const { cluster: c, serve } = props;
  if (
    !readsServeAppsOnOpen(c) ||
    serve?.state !== 'running' ||
    serve.apps.length === 0
  ) {
    return null;
  }
  return (
    <section className="jp-raylab-serve" aria-label={`Serve apps on ${c.name}`}>
      <div className="jp-raylab-jobs-title" aria-hidden="true">
        Serve
      </div>
      <ul className="jp-raylab-serve-list">
        {serve.apps.map(app => (
          <ServeAppRow key={app.name} app={app} url={props.url} />
        ))}
      </ul>
    </section>
  );
}
