"""Which contact target a column's header names, from the words of real exports (PT and EN).

Pure: no I/O. Two tiers, both on :func:`importer.core.layout.header_key`'s form of the header
(case, accents and separators folded): an exact alias (``cpf_cnpj``, ``nome_completo``,
``e_mail``), then the header's words — a word that names a target (``telefone``, ``address``)
unless another word says the column is something else (``fax``, ``opt``, ``ip``, ``empresa``).
The words were drawn from Excel, HubSpot, RD Station and Mailchimp exports; the labeled corpus
in ``tests/fixtures/column_headers.json`` measures them (benchmarks/README.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from importer.core.layout import header_key


class TargetKind(StrEnum):
    """What a column may be mapped to in the columns step."""

    NAME = "name"
    CPF_CNPJ = "cpf_cnpj"
    STREET_ADDRESS = "street_address"
    PHONE = "phone"
    WHATSAPP = "whatsapp"
    EMAIL = "email"
    JOURNEY = "journey"
    CUSTOM_FIELD = "custom_field"  # an existing custom field of the client
    NEW_CUSTOM_FIELD = "new_custom_field"  # a custom field the import will create
    IGNORE = "ignore"


# The targets a header's words can name (the custom ones come from the client's fields).
BUILT_IN = (
    TargetKind.NAME,
    TargetKind.CPF_CNPJ,
    TargetKind.STREET_ADDRESS,
    TargetKind.PHONE,
    TargetKind.WHATSAPP,
    TargetKind.EMAIL,
    TargetKind.JOURNEY,
)

# Confidence of an exact alias and of a header's words.
ALIAS_CONFIDENCE = 0.95
WORDS_CONFIDENCE = 0.8


@dataclass(frozen=True, slots=True)
class HeaderMatch:
    kind: TargetKind
    confidence: float


def _aliases(table: Iterable[tuple[TargetKind, str]]) -> dict[str, TargetKind]:
    return {header_key(word): kind for kind, words in table for word in words.split("|")}


# Whole headers, as header_key folds them (the import's own aliases, core.layout, and more).
_EXACT = _aliases(
    (
        (
            TargetKind.NAME,
            "nome|name|nome completo|full name|nome do cliente|nome cliente|cliente|"
            "razao social|nome/razao social|first name|primeiro nome|contact name|"
            "customer name|nome do contato|nome contato|nome_completo|fullname|nomecompleto|fname",
        ),
        (
            TargetKind.CPF_CNPJ,
            "cpf|cnpj|cpf/cnpj|cnpj/cpf|cpf_cnpj|cpfcnpj|cpf ou cnpj|documento|document|doc|"
            "cpf_ou_cnpj|tax id|taxid|nr documento|num documento|numero documento",
        ),
        (
            TargetKind.STREET_ADDRESS,
            "endereco|street_address|address|logradouro|endereco completo|street|rua|"
            "street address|address line 1|endereco residencial",
        ),
        (TargetKind.EMAIL, "email|e-mail|mail|correio eletronico|email address|emails"),
        (
            TargetKind.PHONE,
            "telefone|celular|phone|fone|tel|cel|mobile|sms|phone number|mobile phone|"
            "cell phone|cellphone|telephone",
        ),
        (TargetKind.WHATSAPP, "whatsapp|whats|wpp|zap|whatsapp_number|whats app|zapzap"),
        (TargetKind.JOURNEY, "jornada|journey"),
    )
)


@dataclass(frozen=True, slots=True)
class _WordRule:
    kind: TargetKind
    triggers: frozenset[str]  # a word that names the target
    blockers: frozenset[str]  # a word that says the column is something else


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _rule(kind: TargetKind, triggers: str, blockers: str) -> _WordRule:
    return _WordRule(kind, _words(triggers), _words(blockers))


# Words that make any column something other than a contact's value: consents, dates, kinds,
# counts, statuses, identifiers of other things.
_NEVER = _words(
    "opt optin optout out consent consentimento autoriza autorizacao aceita aceite permissao"
    " permission date data dt quando when created updated criado atualizado status situacao"
    " tipo type verified verificado valido valid bounced bounce bounces unsubscribed"
    " descadastrado count contagem quantidade qtd opened clicked abertos cliques enviado"
    " enviados sent domain dominio format formato ip source origem"
)

# In priority order: "endereco de e-mail" is an e-mail, "celular whatsapp" a WhatsApp number.
_RULES = (
    _rule(TargetKind.WHATSAPP, "whatsapp whats wpp zap zapzap", ""),
    _rule(TargetKind.EMAIL, "email mail emails correio", "marketing"),
    _rule(
        TargetKind.CPF_CNPJ,
        "cpf cnpj cpfcnpj documento document doc",
        "rg estadual municipal emissao orgao expedidor",
    ),
    _rule(
        TargetKind.PHONE,
        "telefone telefones phone phones fone tel celular cel mobile cell movel sms telephone",
        "ramal extension ext fax operadora carrier ddi",
    ),
    _rule(
        TargetKind.STREET_ADDRESS,
        "endereco address logradouro rua street",
        "2 numero number complemento bairro cep zip postal city cidade billing cobranca",
    ),
    _rule(TargetKind.JOURNEY, "jornada journey", ""),
    _rule(
        TargetKind.NAME,
        "nome name",
        "last sobrenome surname family middle empresa company companhia fantasia mae pai user"
        " usuario username owner dono responsavel vendedor seller campanha campaign produto"
        " product lista list arquivo file conta account deal negocio plano plan banco bank"
        " cidade city estado state pais country grupo group tag evento event form formulario"
        " page pagina site website pet filho filha conjuge",
    ),
)

_NOT_WORD = re.compile(r"[^a-z0-9]+")

# Separated words of a header key, with the spellings that split a word folded back.
_JOINED = (
    ("e_mail", "email"),
    ("whats_app", "whatsapp"),
    ("cpf_cnpj", "cpfcnpj"),
    ("c_p_f", "cpf"),
)


def header_words(key: str) -> frozenset[str]:
    """The words of a header key (any character but a letter or digit separates them)."""
    key = _NOT_WORD.sub("_", key)
    for split, joined in _JOINED:
        key = key.replace(split, joined)
    return frozenset(word for word in key.split("_") if word)


def match_header(header: str) -> HeaderMatch | None:
    """The built-in target a header names, or None (a custom field's, or nothing's)."""
    key = header_key(header)
    exact = _EXACT.get(key)
    if exact is not None:
        return HeaderMatch(exact, ALIAS_CONFIDENCE)
    words = header_words(key)
    if words & _NEVER:
        return None
    for rule in _RULES:
        if words & rule.triggers and not words & rule.blockers:
            return HeaderMatch(rule.kind, WORDS_CONFIDENCE)
    return None


# Headers that say nothing: a spreadsheet's default names ("Coluna 3", "Unnamed: 2", "Field5").
_PLACEHOLDER = re.compile(r"^(coluna|column|col|campo|field|unnamed|sem_titulo|untitled)?_?\d*$")


def says_nothing(header: str) -> bool:
    """True for an empty header or a placeholder one: its name would make a junk field."""
    folded = re.sub(r"[^a-z0-9]+", "_", header_key(header)).strip("_")
    return bool(_PLACEHOLDER.fullmatch(folded))
