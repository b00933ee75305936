import React from 'react';

import { ICluster, IJob, JobStatus } from './clusterApi';
import { useNow } from './clock';
import { CommandIDs, Run } from './commandIds';
import { JobWatcher } from './jobWatch';

/** The card lists this many jobs, then "+N more". */
const MAX_SHOWN = 5;

const STATUS_TEXT: Record<JobStatus, string> = {
  PENDING: 'Pending',
  RUNNING: 'Running',
  SUCCEEDED: 'Succeeded',
  FAILED: 'Failed',
  STOPPED: 'Stopped'
};

/** "Running", or the state as Ray spells it when it is one we do not know. */
function statusText(status: string): string {
  return STATUS_TEXT[status as JobStatus] ?? status;
}

/** 42 s, 3 min 5 s, 2 h 5 min. */
export function jobDurationText(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)} min ${s % 60} s`;
  }
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** How long a running job has run so far, ticking. */
function RunningFor(props: { started: number }): React.ReactElement {
  const now = useNow(1000);
  return <>{jobDurationText(now / 1000 - props.started)}</>;
}

function Duration(props: { job: IJob }): React.ReactElement | null {
  const { started, ended } = props.job;
  if (started === null) {
    return null;
  }
  return (
    <span className="jp-raylab-job-duration">
      {ended === null ? (
        <RunningFor started={started} />
      ) : (
        jobDurationText(ended - started)
      )}
    </span>
  );
}

/** `<job train: analysis.ipynb, In [4]>` → `analysis.ipynb, In [4]`. */
function cellText(cell: string): string {
  const at = cell.indexOf(': ');
  return at < 0 ? '' : cell.slice(at + 2).replace(/>$/, '');
}

function JobRow(props: {
  job: IJob;
  onOpen: (job: string) => void;
}): React.ReactElement {
  const { job } = props;
  const label = `Show the log of job ${job.name}`;
  const cell = cellText(job.cell);
  const status = job.status.toLowerCase();
  return (
    <li className="jp-raylab-job" data-job={job.name} data-status={job.status}>
      <button
        type="button"
        className="jp-raylab-job-name"
        title={cell ? `${label} (from ${cell})` : label}
        aria-label={label}
        onClick={() => props.onOpen(job.name)}
      >
        {job.name}
      </button>
      <span
        className={`jp-raylab-job-state jp-raylab-job-${status}`}
        title={job.message || undefined}
      >
        {statusText(job.status)}
      </span>
      <Duration job={job} />
    </li>
  );
}

/**
 * A Ready cluster's Ray jobs on its card, newest first, live from the
 * watcher; nothing while it has none (or its jobs are not watched).
 */
export function JobsSection(props: {
  cluster: ICluster;
  watcher: JobWatcher;
  run: Run;
}): React.ReactElement | null {
  const { cluster: c, watcher, run } = props;
  const jobs = React.useSyncExternalStore(watcher.subscribe, () =>
    watcher.jobsOf(c)
  );
  if (!jobs || jobs.length === 0) {
    return null;
  }
  const shown = jobs.slice(0, MAX_SHOWN);
  const more = jobs.length - shown.length;
  const open = (job: string): void => {
    void run(CommandIDs.jobLogs, c, { job });
  };
  return (
    <section className="jp-raylab-jobs" aria-label={`Jobs on ${c.name}`}>
      <div className="jp-raylab-jobs-title" aria-hidden="true">
        Jobs
      </div>
      <ul className="jp-raylab-jobs-list">
        {shown.map(job => (
          <JobRow key={job.name} job={job} onOpen={open} />
        ))}
      </ul>
      {more > 0 && (
        <div
          className="jp-raylab-jobs-more"
          title="`%raycluster jobs` in a notebook lists them all"
        >
          +{more} more
        </div>
      )}
    </section>
  );
}
