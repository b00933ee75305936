/**
 * One field of a cluster request as the server declares it
 * (`raylab/spec.py`, `ClusterSpec`; `describe_fields`), served in the
 * `fields` of `GET raylab/profiles`: the New-cluster dialog draws its inputs
 * from these.
 */
export interface IRequestField {
  /** As the REST API names it, e.g. `'gpu_type'`. */
  name: string;
  /** `'whole'` (a whole number), `'choice'` (a select), or text. */
  kind: string;
  label: string;
  /** The command line's help for it. */
  help: string;
  /** Shown under the dialog's input. */
  hint: string | null;
  placeholder: string | null;
  /** Whether the New-cluster dialog draws it. */
  dialog: boolean;
  min?: number;
  max?: number;
}

/**
 * The fields a server older than the field declarations takes from the
 * dialog: it describes none, so they are labelled by their names.
 */
const OLDER_SERVER_FIELDS = [
  'name',
  'gpus',
  'gpu_type',
  'workers',
  'cpus',
  'memory',
  'image',
  'min_workers',
  'max_workers',
  'priority'
];

/** The fields the dialog draws, in the server's order. */
export function dialogFields(
  fields: ReadonlyArray<IRequestField> | undefined
): IRequestField[] {
  if (fields) {
    return fields.filter(f => f.dialog);
  }
  return OLDER_SERVER_FIELDS.map(name => ({
    name,
    kind: 'text',
    label: name.replace('_', ' '),
    help: '',
    hint: null,
    placeholder: null,
    dialog: true
  }));
}
