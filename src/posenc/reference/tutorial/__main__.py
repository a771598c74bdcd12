"""``python -m posenc.reference.tutorial``: the tutorial's usage example and "try it yourself" block."""

from __future__ import annotations

from posenc.reference.tutorial import try_it_yourself, usage_example


def main() -> None:
    usage = usage_example()
    print("Usage example: Embedding(1000, 128), PositionalEncoding(512, 128), token_ids [[42, 156, 89]]")
    names = ("token_embeds", "pos_encodes", "final_embeds")
    print("Shapes: " + ", ".join(f"{n} {s}" for n, s in zip(names, usage["shapes"])))
    for line in usage["lines"]:
        print(line)
    print()
    print("Try it yourself: PositionalEncoding(max_sequence_length=512, embedding_dimension=128)")
    tried = try_it_yourself()
    for line in tried["lines"]:
        print(line)
    s1, s5, s9 = (tried["similarities"][k] for k in (1, 5, 9))
    verdict = (
        "closer positions are more similar"
        if s1 > s5 > s9
        else "NOT monotone: closer is not always more similar"
    )
    print(f"Note: {s1:.3f} > {s5:.3f} > {s9:.3f}: {verdict}" if s1 > s5 > s9 else f"Note: {verdict}")


if __name__ == "__main__":
    main()
