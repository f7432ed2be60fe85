// The case form's assertions (cases/admin_params.py renders them): only the chosen type's parameter fields show, and
// "Edit as JSON" writes those fields into the JSON box and back, so what is saved is always what is on screen.
'use strict';
(() => {
  const rowOf = (element) => element.closest('tr, .inline-related');

  function control(wrapper) {
    return wrapper.querySelector('input:not([type=hidden]), select, textarea');
  }

  function fieldsOf(editor, type) {
    return [...editor.querySelectorAll('.param-field')].filter(
      (wrapper) => wrapper.dataset.types.split(' ').includes(type),
    );
  }

  // The params the typed fields say; throws with the field's name on JSON that does not parse.
  function paramsFromFields(editor, type) {
    const params = {};
    for (const wrapper of fieldsOf(editor, type)) {
      const input = control(wrapper);
      const { kind, name } = wrapper.dataset;
      const text = kind === 'boolean' ? '' : input.value.trim();
      if (kind === 'boolean') {
        if (input.checked) params[name] = true;
      } else if (kind === 'integer') {
        if (text) params[name] = Number(text);
      } else if (kind === 'list') {
        const items = text.split(',').map((item) => item.trim()).filter(Boolean);
        if (items.length) params[name] = items;
      } else if (kind === 'json') {
        if (text) {
          try {
            params[name] = JSON.parse(text);
          } catch (error) {
            throw new Error(`${name}: not valid JSON`);
          }
        }
      } else if (input.value !== '') {
        params[name] = input.value;
      }
    }
    return params;
  }

  // Fills the typed fields from the JSON box; throws saying what the fields cannot show.
  function fieldsFromParams(editor, type, params) {
    if (params === null || typeof params !== 'object' || Array.isArray(params)) {
      throw new Error('the parameters must be a JSON object');
    }
    const byName = new Map(fieldsOf(editor, type).map((wrapper) => [wrapper.dataset.name, wrapper]));
    for (const [name, value] of Object.entries(params)) {
      const wrapper = byName.get(name);
      if (!wrapper) throw new Error(`"${name}" is not a parameter of ${type || 'this type'}`);
      const kind = wrapper.dataset.kind;
      const fits = {
        boolean: typeof value === 'boolean',
        integer: Number.isInteger(value),
        list: Array.isArray(value) && value.every((item) => typeof item === 'string' && !item.includes(',')),
        json: true,
      }[kind] ?? typeof value === 'string';
      if (!fits) throw new Error(`"${name}" holds a value its field cannot show`);
    }
    for (const [name, wrapper] of byName) {
      const input = control(wrapper);
      const value = params[name];
      const kind = wrapper.dataset.kind;
      if (kind === 'boolean') input.checked = value === true;
      else if (value === undefined) input.value = '';
      else if (kind === 'list') input.value = value.join(', ');
      else if (kind === 'json') input.value = JSON.stringify(value);
      else input.value = String(value);
    }
  }

  // A saved assertion's row holds only its own type's fields (issue 37: the page rendered every type's in every
  // row); another type's are copied from the formset's empty form, under this row's names.
  function ensureFields(editor, type) {
    const select = rowOf(editor).querySelector('select[name$="-type"]');
    const rowPrefix = select.name.slice(0, -'-type'.length);
    const formsetPrefix = rowPrefix.slice(0, rowPrefix.lastIndexOf('-'));
    const index = rowPrefix.slice(formsetPrefix.length + 1);
    const empty = document.getElementById(`${formsetPrefix}-empty`);
    if (!empty || index === '__prefix__') return;
    const have = new Set([...editor.querySelectorAll('.param-field')].map((wrapper) => wrapper.dataset.name));
    const before = editor.querySelector('.params-none');
    for (const source of empty.querySelectorAll('.param-field')) {
      if (have.has(source.dataset.name) || !source.dataset.types.split(' ').includes(type)) continue;
      const copy = source.cloneNode(true);
      for (const element of [copy, ...copy.querySelectorAll('*')]) {
        for (const attribute of ['id', 'name', 'for']) {
          const value = element.getAttribute(attribute);
          if (value && value.includes('__prefix__')) {
            element.setAttribute(attribute, value.replaceAll('__prefix__', index));
          }
        }
      }
      before.before(copy);
    }
  }

  function showType(editor, type) {
    ensureFields(editor, type);
    let any = false;
    for (const wrapper of editor.querySelectorAll('.param-field')) {
      const shown = wrapper.dataset.types.split(' ').includes(type);
      wrapper.hidden = !shown;
      any = any || shown;
    }
    editor.querySelector('.params-none').hidden = any || !type;
  }

  function switchEditor(editor, toJSON) {
    const type = rowOf(editor).querySelector('select[name$="-type"]').value;
    const box = editor.querySelector('.params-json textarea');
    const problem = editor.querySelector('.params-switch-error');
    const switchBox = editor.querySelector('.params-switch input[type=checkbox]');
    ensureFields(editor, type);
    try {
      if (toJSON) {
        box.value = JSON.stringify(paramsFromFields(editor, type), null, 2);
      } else {
        fieldsFromParams(editor, type, box.value.trim() ? JSON.parse(box.value) : {});
      }
    } catch (error) {
      switchBox.checked = !toJSON;
      problem.textContent = `Cannot switch: ${error.message}.`;
      problem.hidden = false;
      return;
    }
    problem.hidden = true;
    editor.querySelector('.params-typed').hidden = toJSON;
    editor.querySelector('.params-json').hidden = !toJSON;
  }

  // Delegated, so rows added with "Add another assertion" work too.
  document.addEventListener('change', (event) => {
    const target = event.target;
    if (target.matches('.params-switch input[type=checkbox]')) {
      switchEditor(target.closest('.params-editor'), target.checked);
    } else if (target.matches('select[name$="-type"]')) {
      const editor = rowOf(target)?.querySelector('.params-editor');
      if (editor) showType(editor, target.value);
    }
  });
})();
