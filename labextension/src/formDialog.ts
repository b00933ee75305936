import { Dialog } from '@jupyterlab/apputils';
import { ReactWidget } from '@jupyterlab/ui-components';

/**
 * The `focusNodeSelector` of raylab's dialogs, whose bodies are React forms:
 * the form's field that has the focus, else its first input.
 *
 * JupyterLab's Dialog focuses that selector's element once a React body's
 * `renderPromise` resolves, and ReactWidget resolves it in an idle callback:
 * on a busy browser that comes after the user has started typing in another
 * field, and a plain `input` moved the caret into the first one mid-word. So
 * each body focuses its first field itself as it mounts (`autoFocus`), and the
 * dialog's late focus leaves a field that has it where it is (focusing it
 * again does nothing).
 */
export const FOCUSED_FIELD = 'form :focus, form:not(:focus-within) input';

/**
 * The body of a `FormDialog`: a form that submits itself to the server and
 * shows the server's refusals inline, next to the field they concern.
 */
export abstract class FormBody<T> extends ReactWidget {
  /**
   * Send the form. Resolve to true when done (the dialog closes), false when
   * the body now shows why not (the dialog stays open).
   */
  abstract submit(): Promise<boolean>;

  /** What the dialog resolves with once `submit` succeeded. */
  abstract getValue(): T;
}

/**
 * A JupyterLab dialog whose accept button does not close it at once: it
 * submits the body, and closes only if the server accepted. (The stock
 * `Dialog` resolves as soon as a button is pressed, so a server-side
 * validation error could only be shown by opening a new dialog.)
 */
export class FormDialog<T> extends Dialog<T> {
  constructor(options: FormDialog.IOptions<T>) {
    super({
      ...options,
      body: options.body,
      focusNodeSelector: options.focusNodeSelector ?? FOCUSED_FIELD
    });
    this._form = options.body;
    this._accept = options.buttons.map(b => b.accept);
    this._defaultIndex = options.defaultButton ?? options.buttons.length - 1;
    this.addClass('jp-raylab-FormDialog');
  }

  override resolve(index?: number): void {
    const i = index ?? this._defaultIndex;
    if (!this._accept[i]) {
      super.resolve(i);
      return;
    }
    if (this._busy) {
      return;
    }
    this._setBusy(true);
    this._form
      .submit()
      .then(done => {
        this._setBusy(false);
        if (done) {
          super.resolve(i);
        }
      })
      .catch((reason: unknown) => {
        this._setBusy(false);
        console.error('raylab: form submission failed', reason);
      });
  }

  private _setBusy(busy: boolean): void {
    this._busy = busy;
    this.node.setAttribute('aria-busy', String(busy));
    this.node
      .querySelectorAll<HTMLButtonElement>('.jp-Dialog-footer button')
      .forEach(button => {
        if (button.classList.contains('jp-mod-accept')) {
          button.disabled = busy;
        }
      });
  }

  private _form: FormBody<T>;
  private _accept: boolean[];
  private _defaultIndex: number;
  private _busy = false;
}

export namespace FormDialog {
  export interface IOptions<T> {
    title: string;
    body: FormBody<T>;
    buttons: Dialog.IButton[];
    defaultButton?: number;
    focusNodeSelector?: string;
  }
}
