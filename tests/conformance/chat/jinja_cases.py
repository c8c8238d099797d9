#!/usr/bin/env python3
"""Feature cases for the Jinja interpreter, with expectations rendered by jinja2 in
transformers' environment (see jinja2_reference.py). Writes jinja_cases.json, which
src/chat/jinja_features_test.cc checks. Usage: python3 jinja_cases.py
"""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    from jinja2_reference import make_env, Raised
except ImportError:
    print("skip: jinja2 not installed (Debian: python3-jinja2)")
    sys.exit(77)
env = make_env()
cases = [
 # whitespace control and trim/lstrip
 ("ws_trim_lstrip", "a\n  {% if true %}\n  x\n  {% endif %}\nb\n", {}),
 ("ws_minus", "a  {%- if true -%}  x  {%- endif -%}  b", {}),
 ("ws_expr_minus", "a \n {{- 'x' -}} \n b", {}),
 ("ws_plus", "  {%+ if true %}a{% endif +%}\nb", {}),
 ("ws_comment", "x\n  {# note #}\ny {#- c -#} z", {}),
 ("ws_var_no_lstrip", "  {{ 1 }}\n{{ 2 }}\n", {}),
 ("ws_crlf", "a\r\nb\r\n{% if true %}\r\nc{% endif %}", {}),
 ("raw", "{% raw %}{{ not evaluated }}{% endraw %}!", {}),
 # loop variables
 ("loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {"xs": ["a", "b", "c"]}),
 ("loop_prev_next", "{% for x in xs %}[{{ loop.previtem }}|{{ x }}|{{ loop.nextitem }}]{% endfor %}", {"xs": [1, 2, 3]}),
 ("loop_cycle", "{% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}", {"xs": [1, 2, 3]}),
 ("loop_else", "{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", {"xs": []}),
 ("loop_filter", "{% for x in xs if x is odd %}{{ x }}{{ loop.length }},{% endfor %}", {"xs": [1, 2, 3, 4, 5]}),
 ("loop_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"z": 1, "a": 2}}),
 ("loop_break_continue", "{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {"xs": [1, 2, 3, 4, 5]}),
 ("loop_scope", "{% set x = 'outer' %}{% for i in [1] %}{% set x = 'inner' %}{{ x }}{% endfor %}{{ x }}", {}),
 ("loop_dict_iter", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
 ("loop_string_iter", "{% for c in s %}[{{ c }}]{% endfor %}", {"s": "añ😀"}),
 ("loop_nested", "{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{% endfor %}", {}),
 # if / set / namespace
 ("if_elif_else", "{% for n in [1,2,3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %} {% endfor %}", {}),
 ("set_block", "{% set x %}hello {{ name }}{% endset %}[{{ x }}]", {"name": "bob"}),
 ("set_block_filter", "{% set x | upper %}hello{% endset %}{{ x }}", {}),
 ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
 ("namespace", "{% set ns = namespace(n=0, items=[]) %}{% for x in [1,2,3] %}{% set ns.n = ns.n + x %}{% set ns.items = ns.items + [x * 2] %}{% endfor %}{{ ns.n }} {{ ns.items }}", {}),
 # macros
 ("macro_defaults", "{% macro greet(name, greeting='Hi') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('A') }} {{ greet('B', 'Yo') }} {{ greet(greeting='Hey', name='C') }}", {}),
 ("macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}),
 ("macro_caller_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1,2]) %}<{{ item }}>{% endcall %}", {}),
 ("macro_missing_arg", "{% macro f(a, b) %}[{{ a }}|{{ b }}]{% endmacro %}{{ f(1) }}", {}),
 ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
 ("macro_outlives_loop_scope", "{% set ns = namespace() %}{% for i in [1] %}{% macro m() %}x{% endmacro %}{% set ns.m = m %}{% endfor %}{{ ns.m() }}", {}),
 ("namespace_self_reference", "{% set ns = namespace(n=1) %}{% set ns.me = ns %}{{ ns.me.me.n }}", {}),
 # slicing and indexing
 ("slice", "{{ xs[1:] }} {{ xs[:2] }} {{ xs[::-1] }} {{ xs[-1] }} {{ xs[-2:] }} {{ xs[::2] }} {{ s[1:3] }} {{ s[::-1] }}", {"xs": [1, 2, 3, 4], "s": "héllo"}),
 ("slice_negative_step", "{{ xs[3:0:-1] }} {{ xs[-1:-3:-1] }} {{ xs[10:] }}", {"xs": [1, 2, 3, 4, 5]}),
 ("index_missing", "[{{ xs[10] }}][{{ d.nope }}][{{ d['nope'] }}]", {"xs": [1], "d": {}}),
 ("attr_item_fallback", "{{ d.key }} {{ d['key'] }} {{ m['role'] }} {{ m.role }}", {"d": {"key": "v"}, "m": {"role": "user"}}),
 ("dict_method_shadow", "{{ d.items()|list }} {{ d['items'] }}", {"d": {"items": "field"}}),
 # filters
 ("filter_trim_length", "[{{ '  x  '|trim }}][{{ 'xxhixx'|trim('x') }}] {{ 'héllo'|length }} {{ [1,2]|count }} {{ {'a':1}|length }}", {}),
 ("filter_tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ [1, 'é', none, true, 1.5]|tojson }}|{{ 'a<b>&\"'|tojson }}", {"d": {"b": [1, {"c": None}], "a": "ü"}}),
 ("filter_tojson_sort", "{{ d|tojson(sort_keys=true) }} {{ {}|tojson }} {{ []|tojson(indent=2) }}", {"d": {"b": 1, "a": 2}}),
 ("filter_items", "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}", {"d": {"x": 1, "y": [2]}}),
 ("filter_select", "{{ xs|selectattr('ok')|map(attribute='n')|join(',') }} {{ xs|rejectattr('ok')|map(attribute='n')|list }} {{ xs|selectattr('n', 'equalto', 2)|list|length }}", {"xs": [{"n": 1, "ok": True}, {"n": 2, "ok": False}, {"n": 3, "ok": True}]}),
 ("filter_select_tests", "{{ [1,2,3,4]|select('odd')|list }} {{ [1,2,3,4]|reject('even')|list }} {{ ['a', 1, none]|select('string')|list }}", {}),
 ("filter_join_default", "{{ [1,2,3]|join('-') }} {{ missing|default('dflt') }} {{ ''|default('e', true) }} {{ none|default('x') }} {{ missing|d('y') }}", {}),
 ("filter_case", "{{ 'hello WORLD'|upper }} {{ 'Hello'|lower }} {{ 'hello big-world(x)'|title }} {{ 'hELLO'|capitalize }}", {}),
 ("filter_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }}", {}),
 ("filter_first_last", "{{ [1,2,3]|first }} {{ [1,2,3]|last }} {{ 'abc'|first }} {{ 'abc'|last }}", {}),
 ("filter_numbers", "{{ '42'|int }} {{ '3.7'|int }} {{ 'x'|int(7) }} {{ 3|float }} {{ -3|abs }} {{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.7|round(method='floor') }} {{ 5|string }}", {}),
 ("filter_unique_sort", "{{ ['b','A','a','c']|unique|list }} {{ [3,1,2]|sort }} {{ ['b','A','c']|sort }} {{ [3,1,2]|sort(reverse=true) }} {{ xs|sort(attribute='n')|map(attribute='n')|list }}", {"xs": [{"n": 2}, {"n": 1}]}),
 ("filter_reverse_list", "{{ [1,2,3]|reverse|list }} {{ 'abc'|reverse }} {{ 'ab'|list }}", {}),
 ("filter_indent", "{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'x\n\ny'|indent(1, blank=true) }}", {}),
 ("filter_misc", "{{ [1,2,3]|sum }} {{ [3,1,2]|max }} {{ [3,1,2]|min }} {{ 'a b  c'|wordcount }} {{ 'x'|safe }}", {}),
 # tests
 ("tests", "{{ x is defined }}{{ y is undefined }}{{ n is none }}{{ 's' is string }}{{ 1 is number }}{{ 1.5 is number }}{{ 1 is integer }}{{ 1.0 is integer }}{{ true is integer }}{{ {} is mapping }}{{ [] is iterable }}{{ 's' is sequence }}{{ true is boolean }}{{ false is false }}{{ true is true }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is equalto 2 }}{{ 2 is eq 3 }}{{ 'a' is in 'abc' }}{{ y is iterable }}{{ y is sequence }}", {"x": 1, "n": None}),
 # operators
 ("ops_arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 6 / 2 }} {{ 1 + 2.0 }} {{ true + 1 }} {{ 'ab' * 3 }} {{ [0] * 2 }}", {}),
 ("ops_concat", "{{ 'a' ~ 1 ~ none ~ missing ~ true }} {{ 'x' + 'y' }} {{ [1] + [2] }}", {}),
 ("ops_logic", "{{ 1 and 'x' }} {{ 0 and 'x' }} {{ '' or 'y' }} {{ not none }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' in ['a'] }} {{ 'b' not in 'abc' }} {{ 1 == 1.0 }} {{ none is none }} {{ x is not defined }}", {}),
 ("ops_ternary", "{{ 'y' if true else 'n' }} {{ 'y' if false else 'n' }} [{{ 'y' if false }}] {{ 1 if x is defined else 2 }}", {}),
 ("ops_precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 ~ 3 * 4 }} {{ not 1 == 2 }} {{ [1,2]|length + 1 }} {{ -x|abs }}", {"x": 3}),
 ("err_concat_binds_tighter", "{{ 2 + 3 ~ 4 }}", {}),
 # literals and printing
 ("literals", "{{ 'it\\'s' }} {{ \"tab\\there\" }} {{ '\\u00e9' }} {{ [1, 'a', none, true, 1.0] }} {{ {'k': 'v', 'n': none} }} {{ (1, 2) }} {{ (1,) }} {{ True }} {{ None }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 'a' 'b' }}", {}),
 ("print_values", "{{ x }}|{{ none }}|{{ missing }}|{{ 3.0 }}|{{ f }}|{{ big }}", {"x": "s", "f": 0.5, "big": 12345678901234}),
 # string methods
 ("str_methods", "{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'xxhixx'.strip('x') }} {{ '  hi'.lstrip() }} {{ 'hi\n'.rstrip() }} {{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'aXa'.replace('a', 'b') }} {{ 'hello world'.title() }} {{ 'abc'.upper() }} {{ 'héllo'.find('l') }} {{ 'banana'.count('a') }} {{ '-'.join(['a','b']) }} {{ '{} and {name}'.format(1, name='n') }}", {}),
 ("dict_methods", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }}", {"d": {"a": 1, "b": 2}}),
 # globals
 ("globals", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", {}),
 ("filter_block", "{% filter upper %}hi {{ 'there' }}{% endfilter %}", {}),
 # errors (runtime)
 ("err_raise", "{{ raise_exception('custom message: ' ~ n) }}", {"n": 3}),
 ("err_undefined_attr", "{{ missing.attr }}", {}),
 ("err_none_iter", "{% for x in n %}{% endfor %}", {"n": None}),
 ("err_str_plus_int", "{{ 'a' + 1 }}", {}),
 ("err_div_zero", "{{ 1 / 0 }}", {}),
 ("err_call_undefined", "{{ nope() }}", {}),
 ("err_list_append", "{% set xs = [] %}{{ xs.append(1) }}", {}),
 ("err_tojson_undefined", "{{ missing|tojson }}", {}),
 ("err_range_too_big", "{{ range(1000000)|length }}", {}),
]
out = []
for name, src, ctx in cases:
    try:
        r = {"output": env.from_string(src).render(**ctx)}
    except Raised as e:
        r = {"raise": str(e)}
    except Exception as e:
        r = {"error": f"{type(e).__name__}: {e}"}
    out.append({"name": name, "template": src, "context": ctx, **r})
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'jinja_cases.json')
text = json.dumps(out, ensure_ascii=False, indent=1) + "\n"
if "--check" in sys.argv:
    if open(path, encoding="utf-8").read() != text:
        print("jinja_cases.json is out of date; rerun jinja_cases.py")
        sys.exit(1)
    print(len(out), "cases agree with jinja2")
    sys.exit(0)
open(path, 'w', encoding='utf-8').write(text)
print(len(out), 'cases written')
