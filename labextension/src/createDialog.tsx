import { Dialog } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import React from 'react';

import { RaylabAPIError, describeError, requestAPI } from './api';
import { ICluster, ICreateRequest, createCluster } from './clusterApi';
import { FormBody, FormDialog } from './formDialog';
import { IGpuProfile, IProfilesReply } from './profiles';

/** The form's fields, named as the REST API names them. */
const FIELDS = [
  'name',
  'gpu_type',
  'gpus',
  'workers',
  'cpus',
  'memory',
  'image',
  'min_workers',
  'max_workers',
  'priority'
] as const;
type Field = (typeof FIELDS)[number];

interface IFormValues {
  name: string;
  gpu_type: string;
  gpus: string;
  workers: string;
  cpus: string;
  memory: string;
  image: string;
  autoscale: boolean;
  min_workers: string;
  max_workers: string;
  /** A Kueue priority class the admin lists; '' for the default. */
  priority: string;
}

/** The fields entered as text (all but the selects). */
type TextField = Exclude<Field, 'gpu_type' | 'priority'>;
const NUMERIC: React.InputHTMLAttributes<HTMLInputElement> = {
  inputMode: 'numeric'
};

interface IFormErrors {
  fields: Partial<Record<Field, string>>;
  /** A refusal that concerns no single field (quota, backend, network). */
  form: string | null;
}

function isField(value: string | null): value is Field {
  return value !== null && (FIELDS as ReadonlyArray<string>).includes(value);
}

/** A number when the text is a whole number, else the text (the server refuses it by name). */
function wholeOrText(text: string): number | string {
  const t = text.trim();
  return /^\d+$/.test(t) ? Number(t) : t;
}

export function requestFromValues(v: IFormValues): ICreateRequest {
  const body: ICreateRequest = {
    gpu_type: v.gpu_type,
    gpus: wholeOrText(v.gpus),
    workers: wholeOrText(v.workers)
  };
  if (v.name.trim()) {
    body.name = v.name.trim();
  }
  if (v.cpus.trim()) {
    body.cpus = v.cpus.trim();
  }
  if (v.memory.trim()) {
    body.memory = v.memory.trim();
  }
  if (v.image.trim()) {
    body.image = v.image.trim();
  }
  if (v.autoscale) {
    body.min_workers = wholeOrText(v.min_workers);
    body.max_workers = wholeOrText(v.max_workers);
  }
  if (v.priority) {
    body.priority = v.priority;
  }
  return body;
}

export function errorsFromFailure(reason: unknown): IFormErrors {
  if (reason instanceof RaylabAPIError) {
    if (reason.code === 'invalid' && isField(reason.field)) {
      // "gpus: 3 GPUs cannot be split ..." -> "3 GPUs cannot be split ..."
      const prefix = `${reason.field}: `;
      const text = reason.error.startsWith(prefix)
        ? reason.error.slice(prefix.length)
        : reason.error;
      return { fields: { [reason.field]: text }, form: null };
    }
    if (reason.status === 403) {
      // A quota (or RBAC) refusal: beside the field it limits, when it names one.
      const text =
        typeof reason.detail === 'string'
          ? `${reason.error}: ${reason.detail}`
          : reason.error;
      return isField(reason.field)
        ? { fields: { [reason.field]: text }, form: null }
        : { fields: {}, form: text };
    }
  }
  return { fields: {}, form: describeError(reason) };
}

interface ICreateFormProps {
  profiles: IProfilesReply;
  settings: ServerConnection.ISettings;
  initial: IFormValues;
  errors: IFormErrors;
  busy: boolean;
  onChange: (values: IFormValues) => void;
}

function FieldRow(props: {
  id: string;
  label: string;
  hint?: string;
  error?: string;
  children: React.ReactElement;
}): React.ReactElement {
  const errorId = `${props.id}-error`;
  const hintId = `${props.id}-hint`;
  const described = [props.error ? errorId : '', props.hint ? hintId : '']
    .filter(Boolean)
    .join(' ');
  const control = React.cloneElement(props.children, {
    id: props.id,
    'aria-invalid': props.error ? true : undefined,
    'aria-describedby': described || undefined
  });
  return (
    <div
      className={`jp-raylab-field${props.error ? ' jp-raylab-mod-invalid' : ''}`}
      data-field={props.id.replace('jp-raylab-new-', '')}
    >
      <label htmlFor={props.id}>{props.label}</label>
      {control}
      {props.hint && !props.error && (
        <div id={hintId} className="jp-raylab-field-hint">
          {props.hint}
        </div>
      )}
      {props.error && (
        <div id={errorId} className="jp-raylab-field-error" role="alert">
          {props.error}
        </div>
      )}
    </div>
  );
}

function quotaText(p: IProfilesReply): string {
  const q = p.quota;
  return (
    `Your quota: ${q.gpus_left} of ${q.max_gpus_per_user} GPUs left · ` +
    `${q.clusters_left} of ${q.max_clusters_per_user} clusters left · ` +
    `≤ ${q.max_workers_per_cluster} workers each`
  );
}

/** What a request would get from its Kueue queue (`GET capacity`), or null. */
interface ICapacity {
  free_now: boolean | null;
  text: string;
}

/**
 * The capacity line of a GPU type that queues: read when the request changes
 * (after a pause in typing), never on a timer.
 */
function useCapacity(
  profiles: IProfilesReply,
  settings: ServerConnection.ISettings,
  v: IFormValues
): ICapacity | null {
  const [capacity, setCapacity] = React.useState<ICapacity | null>(null);
  const queued = Boolean(profiles.queues?.[v.gpu_type]);
  React.useEffect(() => {
    if (!queued) {
      setCapacity(null);
      return;
    }
    let live = true;
    const query = new URLSearchParams({
      gpu_type: v.gpu_type,
      gpus: v.gpus.trim(),
      workers: v.workers.trim()
    });
    const timer = setTimeout(() => {
      requestAPI<{ capacity: ICapacity | null }>(
        `capacity?${query.toString()}`,
        { method: 'GET' },
        settings
      )
        .then(reply => live && setCapacity(reply.capacity))
        .catch(() => live && setCapacity(null)); // the form's own check says why
    }, 300);
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [queued, v.gpu_type, v.gpus, v.workers]);
  return capacity;
}

function CreateForm(props: ICreateFormProps): React.ReactElement {
  const [v, setValues] = React.useState(props.initial);
  const capacity = useCapacity(props.profiles, props.settings, v);
  // Fields edited since the server's last answer: their error is hidden.
  const [edited, setEdited] = React.useState<ReadonlySet<string>>(new Set());
  React.useEffect(() => setEdited(new Set()), [props.errors]);
  const { profiles } = props;
  const errors: IFormErrors = {
    form: props.errors.form,
    fields: Object.fromEntries(
      Object.entries(props.errors.fields).filter(([f]) => !edited.has(f))
    )
  };
  const set = (patch: Partial<IFormValues>): void => {
    const next = { ...v, ...patch };
    setValues(next);
    setEdited(new Set([...edited, ...Object.keys(patch)]));
    props.onChange(next);
  };
  const profile: IGpuProfile | undefined = profiles.gpu_types.find(
    p => p.name === v.gpu_type
  );
  const id = (f: string): string => `jp-raylab-new-${f}`;
  // One labelled text input bound to one field of the form.
  const textField = (
    field: TextField,
    label: string,
    input: React.InputHTMLAttributes<HTMLInputElement> = {},
    hint?: string
  ): React.ReactElement => (
    <FieldRow
      id={id(field)}
      label={label}
      hint={hint}
      error={errors.fields[field]}
    >
      <input
        className="jp-mod-styled"
        type="text"
        {...input}
        value={v[field]}
        onChange={e => set({ [field]: e.target.value })}
      />
    </FieldRow>
  );
  const gpus = Number(v.gpus);
  const workers = Number(v.workers);
  let gpuHint = profile?.max_gpus_per_worker
    ? `In the whole cluster; at most ${profile.max_gpus_per_worker} per worker`
    : 'This type has no GPUs';
  if (gpus > 0 && workers > 0 && gpus % workers === 0) {
    gpuHint = `${gpus / workers} per worker`;
  }
  const imageDefault =
    profiles.defaults.image ??
    "rayproject/ray matching this kernel's Ray and Python";
  return (
    <form
      className="jp-raylab-create-form"
      aria-busy={props.busy}
      onSubmit={e => e.preventDefault()}
    >
      <div
        className={`jp-raylab-quota${errors.form ? ' jp-raylab-mod-invalid' : ''}`}
      >
        {quotaText(profiles)}
      </div>
      {capacity && (
        <div
          className={`jp-raylab-capacity${capacity.free_now ? '' : ' jp-raylab-mod-queued'}`}
          role="status"
        >
          {capacity.text}
        </div>
      )}
      {errors.form && (
        <div className="jp-raylab-form-error" role="alert">
          {errors.form}
        </div>
      )}
      {textField('name', 'Name', {
        placeholder: "lowercase letters, digits, '-'; empty: generated",
        autoComplete: 'off',
        spellCheck: false
      })}
      <FieldRow
        id={id('gpu_type')}
        label="GPU type"
        error={errors.fields.gpu_type}
      >
        <select
          className="jp-mod-styled"
          value={v.gpu_type}
          onChange={e => {
            const next = profiles.gpu_types.find(
              p => p.name === e.target.value
            );
            set({
              gpu_type: e.target.value,
              gpus: next && next.max_gpus_per_worker === 0 ? '0' : v.gpus
            });
          }}
        >
          {profiles.gpu_types.map(p => (
            <option key={p.name} value={p.name}>
              {p.name} — {p.description}
            </option>
          ))}
        </select>
      </FieldRow>
      <div className="jp-raylab-field-pair">
        {textField('gpus', 'GPUs', NUMERIC, gpuHint)}
        {textField('workers', 'Workers', NUMERIC, 'Besides the head')}
      </div>
      <div className="jp-raylab-field-pair">
        {textField('cpus', 'CPUs per worker', {
          placeholder: profile?.default_cpus
        })}
        {textField('memory', 'Memory per worker', {
          placeholder: profile?.default_memory
        })}
      </div>
      {textField(
        'image',
        'Image',
        {
          placeholder: profiles.defaults.image ?? 'default',
          spellCheck: false
        },
        `Default: ${imageDefault}`
      )}
      {(profiles.priority_classes ?? []).length > 0 &&
        profiles.queues?.[v.gpu_type] && (
          <FieldRow
            id={id('priority')}
            label="Priority"
            hint="Orders the queue; a higher one may preempt lower ones"
            error={errors.fields.priority}
          >
            <select
              className="jp-mod-styled"
              value={v.priority}
              onChange={e => set({ priority: e.target.value })}
            >
              <option value="">default</option>
              {(profiles.priority_classes ?? []).map(name => (
                <option key={name} value={name}>
                  {name}
                </option>
              ))}
            </select>
          </FieldRow>
        )}
      {props.profiles.autoscales && (
        <div className="jp-raylab-field jp-raylab-checkbox">
          <label>
            <input
              type="checkbox"
              checked={v.autoscale}
              onChange={e => set({ autoscale: e.target.checked })}
            />{' '}
            Autoscale between a minimum and maximum number of workers
          </label>
        </div>
      )}
      {props.profiles.autoscales && v.autoscale && (
        <div className="jp-raylab-field-pair">
          {textField('min_workers', 'Min workers', NUMERIC)}
          {textField('max_workers', 'Max workers', NUMERIC)}
        </div>
      )}
    </form>
  );
}

/**
 * The body of the "New cluster" dialog: posts the request itself and keeps
 * the dialog open with the server's message next to the refused field.
 */
export class CreateClusterBody extends FormBody<ICluster | null> {
  constructor(
    private readonly _profiles: IProfilesReply,
    private readonly _settings: ServerConnection.ISettings,
    defaultGpuType: string
  ) {
    super();
    this.addClass('jp-raylab-create');
    const gpuType = _profiles.gpu_types.some(p => p.name === defaultGpuType)
      ? defaultGpuType
      : _profiles.defaults.gpu_type;
    this._values = {
      name: '',
      gpu_type: gpuType,
      gpus: String(_profiles.defaults.gpus),
      workers: String(_profiles.defaults.workers),
      cpus: '',
      memory: '',
      image: '',
      autoscale: false,
      min_workers: '0',
      max_workers: String(Math.max(1, _profiles.defaults.workers)),
      priority: ''
    };
  }

  /** The cluster the server returned, and whether it already existed. */
  get existed(): boolean {
    return this._existed;
  }

  async submit(): Promise<boolean> {
    this._busy = true;
    this._errors = { fields: {}, form: null };
    this.update();
    try {
      const reply = await createCluster(
        requestFromValues(this._values),
        this._settings
      );
      this._cluster = reply.cluster;
      this._existed = !reply.created;
      return true;
    } catch (reason) {
      this._errors = errorsFromFailure(reason);
      return false;
    } finally {
      this._busy = false;
      this.update();
    }
  }

  getValue(): ICluster | null {
    return this._cluster;
  }

  protected render(): React.ReactElement {
    return (
      <CreateForm
        profiles={this._profiles}
        settings={this._settings}
        initial={this._values}
        errors={this._errors}
        busy={this._busy}
        onChange={values => {
          this._values = values;
        }}
      />
    );
  }

  private _values: IFormValues;
  private _errors: IFormErrors = { fields: {}, form: null };
  private _busy = false;
  private _cluster: ICluster | null = null;
  private _existed = false;
}

/**
 * Show the "New cluster" dialog.
 *
 * @returns the created cluster, or null when cancelled
 */
export async function showCreateDialog(
  profiles: IProfilesReply,
  settings: ServerConnection.ISettings,
  defaultGpuType: string
): Promise<{ cluster: ICluster; existed: boolean } | null> {
  const body = new CreateClusterBody(profiles, settings, defaultGpuType);
  const dialog = new FormDialog<ICluster | null>({
    title: 'New Ray cluster',
    body,
    buttons: [
      Dialog.cancelButton(),
      Dialog.okButton({ label: 'Create', ariaLabel: 'Create the cluster' })
    ],
    focusNodeSelector: 'input'
  });
  const result = await dialog.launch();
  dialog.dispose();
  if (!result.button.accept || !result.value) {
    return null;
  }
  return { cluster: result.value, existed: body.existed };
}
