import { Dialog } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import React from 'react';

import { RaylabAPIError, describeError, requestAPI } from './api';
import { CreateRequest, ICluster, createCluster } from './clusterApi';
import { FormBody, FormDialog } from './formDialog';
import { IGpuProfile, IProfilesReply } from './profiles';
import { IRequestField, dialogFields } from './requestFields';

/**
 * Where the dialog draws the fields it knows, row by row; any other field the
 * server declares for the dialog follows on a row of its own. The priority
 * (a select, where clusters queue) and the autoscaling range (behind a
 * checkbox) come last.
 */
const ROWS: ReadonlyArray<ReadonlyArray<string>> = [
  ['name'],
  ['gpu_type'],
  ['gpus', 'workers'],
  ['cpus', 'memory'],
  ['image']
];
const AUTOSCALING = ['min_workers', 'max_workers'];
const PLACED = new Set([...ROWS.flat(), ...AUTOSCALING, 'priority']);
/** Filled in from the profile's defaults, so always sent. */
const PREFILLED = new Set(['gpu_type', 'gpus', 'workers']);

type InputProps = React.InputHTMLAttributes<HTMLInputElement>;
const NUMERIC: InputProps = { inputMode: 'numeric' };
/** What some inputs add to their field's declaration. */
const INPUT_EXTRAS: Record<string, InputProps> = {
  // The dialog's first field: see FOCUSED_FIELD.
  name: { autoComplete: 'off', spellCheck: false, autoFocus: true },
  image: { spellCheck: false }
};

interface IFormValues {
  /**
   * Each field's text by its REST name; a select's choice too (`priority`:
   * '' for the default).
   */
  text: Record<string, string>;
  autoscale: boolean;
}

interface IFormErrors {
  fields: Record<string, string | undefined>;
  /** A refusal that concerns no single field (quota, backend, network). */
  form: string | null;
}

/** A number when the text is a whole number, else the text (the server refuses it by name). */
function wholeOrText(text: string): number | string {
  const t = text.trim();
  return /^\d+$/.test(t) ? Number(t) : t;
}

export function requestFromValues(
  v: IFormValues,
  fields: ReadonlyArray<IRequestField>
): CreateRequest {
  const body: CreateRequest = {};
  for (const field of fields) {
    const text = v.text[field.name] ?? '';
    const sent = AUTOSCALING.includes(field.name)
      ? v.autoscale
      : PREFILLED.has(field.name) || text.trim() !== '';
    if (sent) {
      body[field.name] =
        field.kind === 'whole' ? wholeOrText(text) : text.trim();
    }
  }
  return body;
}

/**
 * The server's refusal, next to the field it names when that is one of
 * `shown` (without `shown`: any field it names).
 */
export function errorsFromFailure(
  reason: unknown,
  shown?: ReadonlyArray<string>
): IFormErrors {
  const isField = (field: string | null): field is string =>
    field !== null && (shown ? shown.includes(field) : field !== 'body');
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
  /** The fields the dialog draws. */
  fields: ReadonlyArray<IRequestField>;
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
  const { gpu_type: gpuType, gpus, workers } = v.text;
  const queued = Boolean(profiles.queues?.[gpuType]);
  React.useEffect(() => {
    if (!queued) {
      setCapacity(null);
      return;
    }
    let live = true;
    const query = new URLSearchParams({
      gpu_type: gpuType,
      gpus: gpus.trim(),
      workers: workers.trim()
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
  }, [queued, gpuType, gpus, workers]);
  return capacity;
}

function CreateForm(props: ICreateFormProps): React.ReactElement {
  const [v, setValues] = React.useState(props.initial);
  const capacity = useCapacity(props.profiles, props.settings, v);
  // Fields edited since the server's last answer: their error is hidden.
  const [edited, setEdited] = React.useState<ReadonlySet<string>>(new Set());
  React.useEffect(() => setEdited(new Set()), [props.errors]);
  const { profiles, fields } = props;
  const errors: IFormErrors = {
    form: props.errors.form,
    fields: Object.fromEntries(
      Object.entries(props.errors.fields).filter(([f]) => !edited.has(f))
    )
  };
  const update = (
    text: Record<string, string>,
    autoscale = v.autoscale
  ): void => {
    const next = { text: { ...v.text, ...text }, autoscale };
    setValues(next);
    setEdited(new Set([...edited, ...Object.keys(text)]));
    props.onChange(next);
  };
  const t = v.text;
  const profile: IGpuProfile | undefined = profiles.gpu_types.find(
    p => p.name === t.gpu_type
  );
  const id = (f: string): string => `jp-raylab-new-${f}`;
  const declared = new Map(fields.map(f => [f.name, f]));
  const gpus = Number(t.gpus);
  const workers = Number(t.workers);
  let gpuHint = profile?.max_gpus_per_worker
    ? `In the whole cluster; at most ${profile.max_gpus_per_worker} per worker`
    : 'This type has no GPUs';
  if (gpus > 0 && workers > 0 && gpus % workers === 0) {
    gpuHint = `${gpus / workers} per worker`;
  }
  const imageDefault =
    profiles.defaults.image ??
    "rayproject/ray matching this kernel's Ray and Python";
  // What the form knows better than the declaration: the chosen GPU type's
  // and the profiles' defaults.
  const fromForm: Record<string, { hint?: string; placeholder?: string }> = {
    gpus: { hint: gpuHint },
    cpus: { placeholder: profile?.default_cpus },
    memory: { placeholder: profile?.default_memory },
    image: {
      placeholder: profiles.defaults.image ?? 'default',
      hint: `Default: ${imageDefault}`
    }
  };
  // One labelled text input bound to one field of the form.
  const textField = (field: IRequestField): React.ReactElement => {
    const own = fromForm[field.name] ?? {};
    const input: InputProps = {
      ...(field.kind === 'whole' ? NUMERIC : {}),
      placeholder: own.placeholder ?? field.placeholder ?? undefined,
      ...INPUT_EXTRAS[field.name]
    };
    return (
      <FieldRow
        key={field.name}
        id={id(field.name)}
        label={field.label}
        hint={own.hint ?? field.hint ?? undefined}
        error={errors.fields[field.name]}
      >
        <input
          className="jp-mod-styled"
          type="text"
          {...input}
          value={t[field.name] ?? ''}
          onChange={e => update({ [field.name]: e.target.value })}
        />
      </FieldRow>
    );
  };
  const gpuTypeField = (field: IRequestField): React.ReactElement => (
    <FieldRow
      key={field.name}
      id={id(field.name)}
      label={field.label}
      hint={field.hint ?? undefined}
      error={errors.fields[field.name]}
    >
      <select
        className="jp-mod-styled"
        value={t.gpu_type}
        onChange={e => {
          const next = profiles.gpu_types.find(p => p.name === e.target.value);
          update({
            gpu_type: e.target.value,
            gpus: next && next.max_gpus_per_worker === 0 ? '0' : t.gpus
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
  );
  const draw = (name: string): React.ReactElement | null => {
    const field = declared.get(name);
    if (!field) {
      return null;
    }
    return name === 'gpu_type' ? gpuTypeField(field) : textField(field);
  };
  const row = (names: ReadonlyArray<string>): React.ReactNode =>
    names.length > 1 ? (
      <div key={names.join()} className="jp-raylab-field-pair">
        {names.map(draw)}
      </div>
    ) : (
      draw(names[0])
    );
  const others = fields.filter(f => !PLACED.has(f.name)).map(f => [f.name]);
  const priority = declared.get('priority');
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
      {[...ROWS, ...others].map(row)}
      {priority &&
        (profiles.priority_classes ?? []).length > 0 &&
        profiles.queues?.[t.gpu_type] && (
          <FieldRow
            id={id('priority')}
            label={priority.label}
            hint={priority.hint ?? undefined}
            error={errors.fields.priority}
          >
            <select
              className="jp-mod-styled"
              value={t.priority}
              onChange={e => update({ priority: e.target.value })}
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
      {profiles.autoscales && (
        <div className="jp-raylab-field jp-raylab-checkbox">
          <label>
            <input
              type="checkbox"
              checked={v.autoscale}
              onChange={e => update({}, e.target.checked)}
            />{' '}
            Autoscale between a minimum and maximum number of workers
          </label>
        </div>
      )}
      {profiles.autoscales && v.autoscale && row(AUTOSCALING)}
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
    this._fields = dialogFields(_profiles.fields);
    const text: Record<string, string> = Object.fromEntries(
      this._fields.map(f => [f.name, ''])
    );
    this._values = {
      text: {
        ...text,
        gpu_type: gpuType,
        gpus: String(_profiles.defaults.gpus),
        workers: String(_profiles.defaults.workers),
        min_workers: '0',
        max_workers: String(Math.max(1, _profiles.defaults.workers))
      },
      autoscale: false
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
        requestFromValues(this._values, this._fields),
        this._settings
      );
      this._cluster = reply.cluster;
      this._existed = !reply.created;
      return true;
    } catch (reason) {
      this._errors = errorsFromFailure(
        reason,
        this._fields.map(f => f.name)
      );
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
        fields={this._fields}
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

  private readonly _fields: IRequestField[];
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
    ]
  });
  const result = await dialog.launch();
  dialog.dispose();
  if (!result.button.accept || !result.value) {
    return null;
  }
  return { cluster: result.value, existed: body.existed };
}
