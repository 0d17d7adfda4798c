"""Pages generated from the provider's own metadata at build time, so the docs cannot drift from the code.

``{melon-config}``       the ``[melon]`` options, from ``provider_info``'s ``config`` section
``{melon-conn-fields}``  the yarn connection's extra fields (the form Airflow shows), from ``provider_info``'s
                         ``conn-fields`` and ``ui-field-behaviour``
"""

from __future__ import annotations

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from airflow_provider_melon.provider_info import get_provider_info


def _para(*children) -> nodes.paragraph:
    return nodes.paragraph("", "", *children)


def _field_list(rows: list[tuple[str, nodes.Node]]) -> nodes.field_list:
    fields = nodes.field_list()
    for name, body in rows:
        fields += nodes.field("", nodes.field_name(text=name), nodes.field_body("", _para(body)))
    return fields


def _literal(value) -> nodes.Node:
    return nodes.literal(text=str(value)) if value not in (None, "") else nodes.emphasis(text="not set")


class MelonConfig(SphinxDirective):
    """Every option of the ``[melon]`` section: description, type, default, example, environment variable."""

    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for section, body in sorted(get_provider_info()["config"].items()):
            items = nodes.definition_list()
            for key, opt in sorted(body["options"].items()):
                anchor = nodes.make_id(f"config-{section}-{key}")
                term = nodes.term("", "", nodes.literal(text=f"[{section}] {key}"))
                term["ids"].append(anchor)
                definition = nodes.definition(
                    "",
                    _para(nodes.Text(opt["description"])),
                    _field_list(
                        [
                            ("Type", nodes.Text(opt["type"])),
                            ("Default", _literal(opt.get("default"))),
                            ("Example", _literal(opt.get("example"))),
                            ("Environment variable", nodes.literal(text=f"AIRFLOW__{section.upper()}__{key.upper()}")),
                            ("Added in", nodes.Text(opt["version_added"])),
                        ]
                    ),
                )
                items += nodes.definition_list_item("", term, definition)
            out += [_para(nodes.Text(body["description"])), items]
        return out


class MelonConnFields(SphinxDirective):
    """The yarn connection type's extra fields: key, label, default, placeholder, description."""

    def run(self) -> list[nodes.Node]:
        [conn] = [c for c in get_provider_info()["connection-types"] if c["connection-type"] == "yarn"]
        placeholders = conn["ui-field-behaviour"].get("placeholders", {})
        items = nodes.definition_list()
        for key, field in conn["conn-fields"].items():
            schema = field.get("schema", {})
            term = nodes.term("", "", nodes.literal(text=key), nodes.Text(f" ({field['label']})"))
            term["ids"].append(nodes.make_id(f"conn-yarn-{key}"))
            kind = schema.get("type")
            kind = " or ".join(t for t in kind if t != "null") if isinstance(kind, list) else kind
            rows = [("Type", nodes.Text(str(kind)))]
            if "enum" in schema:
                rows.append(("One of", nodes.Text(", ".join(map(str, schema["enum"])))))
            rows.append(("Default", _literal(schema.get("default"))))
            if key in placeholders:
                rows.append(("Placeholder", _literal(placeholders[key])))
            items += nodes.definition_list_item(
                "", term, nodes.definition("", _para(nodes.Text(field["description"])), _field_list(rows))
            )
        return [items]


def setup(app):
    app.add_directive("melon-config", MelonConfig)
    app.add_directive("melon-conn-fields", MelonConnFields)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
