def row_sums(x):
    return torch.sum(x, dim=-1)
